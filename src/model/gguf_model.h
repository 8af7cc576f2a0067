// GGUF checkpoints for the decoder: the ModelConfig a file's metadata describes, and a
// WeightSource that serves its tensors under Hugging Face names, so the one weight loader
// (model/weights.h) validates, fuses and uploads them like a safetensors checkpoint's.
//
// Architectures (general.architecture): llama (also Mistral files, which llama.cpp writes as
// llama), mistral, qwen2, qwen3; any other is refused by name. Config keys read, under the
// architecture's prefix: block_count, embedding_length, feed_forward_length,
// attention.head_count[_kv], attention.key_length, attention.layer_norm_rms_epsilon,
// context_length, rope.freq_base, rope.dimension_count, rope.scaling.{type,factor},
// rope.scale_linear, attention.sliding_window (mistral); the vocabulary size comes from
// token_embd.weight, tied embeddings from the absence of output.weight, biases from the presence
// of their tensors, a rope_freqs.weight tensor becomes per-frequency divisors (Llama 3.1 scaling).
//
// Tensors are served as stored (F32, F16, BF16 or ggml blocks, which are flashgen dtypes); the
// loader keeps them so or dequantizes them, as the backend asks. llama files store the rows of attn_q / attn_k
// permuted for llama.cpp's interleaved RoPE; they are permuted back here exactly as Hugging Face's
// GGUF loader does, so the weights equal transformers' after loading the same file.
// Errors name the file and the key or tensor.
#pragma once

#include <memory>
#include <string>

#include "gguf/gguf.h"
#include "model/config.h"
#include "model/weights.h"

namespace fg {

// The config of a GGUF model file (config.dir is set to the file's path).
Result<ModelConfig> gguf_model_config(const GgufFile& file);

// The file's tensors under Hugging Face names ("model.layers.0.self_attn.q_proj.weight" ->
// "blk.0.attn_q.weight"). `file` and `config` must outlive the source.
std::unique_ptr<WeightSource> gguf_weight_source(const GgufFile& file, const ModelConfig& config);

// The GGUF tensor name of a Hugging Face one, or "" when GGUF files have no such tensor.
std::string gguf_tensor_name(const std::string& hf_name);

// The config of a model path as Model::load reads it: a .gguf file (or a folder holding one
// .gguf and no config.json) through gguf_model_config, else a Hugging Face folder's config.json.
Result<ModelConfig> load_any_model_config(const std::string& path);

}  // namespace fg
