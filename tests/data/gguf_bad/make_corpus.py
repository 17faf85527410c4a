#!/usr/bin/env python3
"""Writes the hand-made malformed GGUF corpus and expected.txt (file<TAB>message substring).

Each file breaks one rule of the format; the reader must reject it with a message naming the
problem (and never crash). Re-run after changing a case: python3 make_corpus.py
"""
import struct

def s(x: bytes) -> bytes:
    return struct.pack('<Q', len(x)) + x

def kv_u32(key, v):
    return s(key) + struct.pack('<I', 4) + struct.pack('<I', v)

def kv_str(key, v):
    return s(key) + struct.pack('<I', 8) + s(v)

def header(n_tensors, n_kv, version=3):
    return b'GGUF' + struct.pack('<Iqq', version, n_tensors, n_kv)

def tinfo(name, dims, ttype, offset):
    return s(name) + struct.pack('<I', len(dims)) + b''.join(struct.pack('<q', d) for d in dims) + \
        struct.pack('<IQ', ttype, offset)

def pad(b, a=32):
    return b + b'\0' * ((-len(b)) % a)

good_kv = kv_str(b'general.architecture', b'llama')
cases = {}

cases['empty.gguf'] = (b'', 'too small for a GGUF header')
cases['bad_magic.gguf'] = (b'GGML' + b'\0' * 20, 'bad magic')
cases['version1.gguf'] = (header(0, 0, version=1), 'version 1 is not supported')
cases['version9.gguf'] = (header(0, 0, version=9), 'unsupported GGUF version 9')
cases['big_endian.gguf'] = (b'GGUF' + struct.pack('>I', 3) + b'\0' * 16, 'big-endian')
cases['truncated_header.gguf'] = (b'GGUF' + struct.pack('<I', 3) + b'\0' * 5, 'file truncated')
cases['negative_kv_count.gguf'] = (header(0, -1), 'absurd metadata count -1')
cases['huge_tensor_count.gguf'] = (header(1 << 60, 0), 'absurd tensor count')
cases['huge_kv_count.gguf'] = (header(0, 1 << 40) + good_kv, 'absurd metadata count')
cases['string_too_long.gguf'] = (header(0, 1) + struct.pack('<Q', 1 << 62) + b'abc' + b'\0' * 16,
                                 'key length 4611686018427387904 exceeds')
cases['value_string_overflow.gguf'] = (header(0, 1) + s(b'k') + struct.pack('<I', 8) +
                                       struct.pack('<Q', 0xFFFFFFFFFFFFFFFF), "key 'k': string value length")
cases['unknown_value_type.gguf'] = (header(0, 1) + s(b'general.x') + struct.pack('<I', 77),
                                    "key 'general.x': unknown value type 77")
cases['unknown_array_type.gguf'] = (header(0, 1) + s(b'a') + struct.pack('<II', 9, 99) + struct.pack('<Q', 1),
                                    'unknown array element type 99')
cases['huge_array.gguf'] = (header(0, 1) + s(b'arr') + struct.pack('<II', 9, 6) + struct.pack('<Q', 1 << 61),
                            "key 'arr': array length 2305843009213693952 of float32 cannot fit")
cases['duplicate_key.gguf'] = (header(0, 2) + kv_u32(b'a.b', 1) + kv_u32(b'a.b', 2), "key 'a.b': duplicate key")
cases['truncated_value.gguf'] = (header(0, 1) + s(b'x') + struct.pack('<I', 10) + b'\1\2', "key 'x': file truncated")
cases['alignment_not_pow2.gguf'] = (header(0, 1) + kv_u32(b'general.alignment', 48), 'general.alignment = 48 is not a power of two')
cases['alignment_wrong_type.gguf'] = (header(0, 1) + kv_str(b'general.alignment', b'32'), 'general.alignment has type string')
nested = s(b'deep') + struct.pack('<I', 9)
for _ in range(6):
    nested += struct.pack('<IQ', 9, 1)
nested += struct.pack('<IQ', 4, 0)
cases['nested_too_deep.gguf'] = (header(0, 1) + nested, 'arrays nested deeper than')

def tensor_file(infos, data_len, kvs=good_kv, n_kv=1):
    body = header(len(infos), n_kv) + kvs + b''.join(infos)
    return pad(body) + b'\x11' * data_len

cases['tensor_name_too_long.gguf'] = (tensor_file([tinfo(b'x' * 70, [32], 0, 0)], 128),
                                      'is 70 bytes, longer than the 63 allowed')
cases['too_many_dims.gguf'] = (tensor_file([tinfo(b't', [1, 1, 1, 1, 1], 0, 0)], 32), "tensor 't': 5 dimensions")
cases['negative_dim.gguf'] = (tensor_file([tinfo(b't', [4, -2], 0, 0)], 32), 'negative dimension ne[1] = -2')
cases['unknown_tensor_type.gguf'] = (tensor_file([tinfo(b't', [32], 123, 0)], 128), 'unknown tensor type 123')
cases['unsupported_tensor_type.gguf'] = (tensor_file([tinfo(b't', [256], 16, 0)], 128),
                                         'tensor type 16 (iq2_xxs) is not supported')
cases['bad_block_multiple.gguf'] = (tensor_file([tinfo(b't', [33], 8, 0)], 64),
                                    'row length 33 is not a multiple of the q8_0 block size 32')
cases['elements_overflow.gguf'] = (tensor_file([tinfo(b't', [1 << 40, 1 << 40], 0, 0)], 32), 'element count overflows')
cases['misaligned_offset.gguf'] = (tensor_file([tinfo(b't', [8], 0, 4)], 64),
                                   'data offset 4 is not a multiple of the alignment 32')
cases['data_past_end.gguf'] = (tensor_file([tinfo(b't', [64], 0, 0)], 100), "tensor 't': data")
cases['overlap.gguf'] = (tensor_file([tinfo(b'a', [32], 0, 0), tinfo(b'b', [32], 0, 64)], 256),
                         "tensors 'a' and 'b' overlap")
cases['duplicate_tensor.gguf'] = (tensor_file([tinfo(b'w', [8], 0, 0), tinfo(b'w', [8], 0, 32)], 64),
                                  "tensor 'w': duplicate tensor name")
cases['truncated_tensor_info.gguf'] = (header(1, 1) + good_kv + s(b'weight') + struct.pack('<I', 2) + b'\1\0',
                                       "tensor 'weight': file truncated")

# Hyper-parameter cases: well-formed containers whose values no model can run. The reader accepts
# them; ModelConfig::from_gguf must refuse each with the message in expected_config.txt.
def kv_f32(key, v):
    return s(key) + struct.pack('<I', 6) + struct.pack('<f', v)

base_config = {
    b'llama.context_length': ('u32', 256), b'llama.embedding_length': ('u32', 64),
    b'llama.block_count': ('u32', 2), b'llama.feed_forward_length': ('u32', 128),
    b'llama.attention.head_count': ('u32', 4), b'llama.attention.head_count_kv': ('u32', 2),
    b'llama.attention.layer_norm_rms_epsilon': ('f32', 1e-5), b'llama.rope.freq_base': ('f32', 10000.0),
    b'llama.vocab_size': ('u32', 32),
}

def config_file(**changes):
    kv = dict(base_config)
    for k, v in changes.items():
        key = b'llama.' + k.replace('__', '.').encode()
        if v is None:
            kv.pop(key, None)
        else:
            kv[key] = v
    body = kv_str(b'general.architecture', b'llama')
    for key, (t, v) in kv.items():
        body += kv_u32(key, v) if t == 'u32' else kv_f32(key, v) if t == 'f32' else kv_str(key, v)
    return header(0, 1 + len(kv)) + body

nan, inf = float('nan'), float('inf')
config_cases = {
    'config_rms_eps_nan.gguf': (config_file(attention__layer_norm_rms_epsilon=('f32', nan)),
                                "layer_norm_rms_epsilon' = nan is out of range"),
    'config_rms_eps_negative.gguf': (config_file(attention__layer_norm_rms_epsilon=('f32', -1e-5)),
                                     "layer_norm_rms_epsilon' = -1e-05 is out of range"),
    'config_rms_eps_inf.gguf': (config_file(attention__layer_norm_rms_epsilon=('f32', inf)),
                                "layer_norm_rms_epsilon' = inf is out of range"),
    'config_rms_eps_zero.gguf': (config_file(attention__layer_norm_rms_epsilon=('f32', 0.0)),
                                 "layer_norm_rms_epsilon' = 0 is out of range"),
    'config_rms_eps_missing.gguf': (config_file(attention__layer_norm_rms_epsilon=None),
                                    "missing required key 'llama.attention.layer_norm_rms_epsilon'"),
    'config_rope_base_zero.gguf': (config_file(rope__freq_base=('f32', 0.0)), "rope.freq_base' = 0 is out of range"),
    'config_rope_base_negative.gguf': (config_file(rope__freq_base=('f32', -10000.0)),
                                       "rope.freq_base' = -10000 is out of range"),
    'config_rope_base_nan.gguf': (config_file(rope__freq_base=('f32', nan)), "rope.freq_base' = nan is out of range"),
    'config_rope_scaling_negative.gguf': (config_file(rope__scaling__factor=('f32', -2.0)),
                                          "rope.scaling.factor' = -2 is out of range"),
    'config_rope_scaling_yarn.gguf': (config_file(rope__scaling__factor=('f32', 4.0), rope__scaling__type=('str', b'yarn')),
                                      "rope scaling 'yarn' is not supported"),
    'config_rope_dims_odd.gguf': (config_file(rope__dimension_count=('u32', 7)),
                                  'rope.dimension_count 7 does not fit head_dim 16'),
    'config_head_count_zero.gguf': (config_file(attention__head_count=('u32', 0)),
                                    "attention.head_count' = 0 is out of range"),
    'config_head_kv_not_divisor.gguf': (config_file(attention__head_count_kv=('u32', 3)),
                                        'head_count 4 is not a multiple of head_count_kv 3'),
    'config_heads_wider_than_embd.gguf': (config_file(embedding_length=('u32', 2)),
                                          'embedding_length 2 is smaller than head_count 4'),
    'config_block_count_zero.gguf': (config_file(block_count=('u32', 0)), "block_count' = 0 is out of range"),
    'config_context_zero.gguf': (config_file(context_length=('u32', 0)), "context_length' = 0 is out of range"),
    'config_vocab_size_zero.gguf': (config_file(vocab_size=('u32', 0)), "vocab_size' = 0 is out of range"),
}

for listing, table in (('expected.txt', cases), ('expected_config.txt', config_cases)):
    with open(listing, 'w') as out:
        for name, (data, msg) in sorted(table.items()):
            with open(name, 'wb') as f:
                f.write(data)
            out.write(f'{name}\t{msg}\n')
print(f'{len(cases)} malformed files, {len(config_cases)} out-of-range configurations')
