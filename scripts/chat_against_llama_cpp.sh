#!/usr/bin/env bash
# SmolLM2-135M-Instruct's Q4_1 GGUF answering one chat question greedily, ours against
# llama.cpp's `llama-simple` on the same file and the same rendered prompt (the chat
# template's, with its default system message), and ours dequantized to f32: does
# llama.cpp answer as the quantized weights make ours answer, or is ours at fault?
#
#   bash scripts/fetch_smollm2.sh && bash scripts/build_llama_cpp.sh
#   bash scripts/chat_against_llama_cpp.sh > docs/generate/quantized-chat.txt
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${POSENC_CACHE:-.cache}
model=$cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
question="What is the capital of France?"
prompt=$'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\n'"$question"$'<|im_end|>\n<|im_start|>assistant\n'
tokens=24
cargo build --release --quiet
echo "question: $question (greedy, $tokens tokens, $(basename "$model"))"
echo
echo "llama.cpp llama-simple, quantized:"
"$cache/llama.cpp/llama-simple" -m "$model" -n "$tokens" "$prompt" 2>/dev/null | tail -n 1
echo
for flags in "" "--kv-cache f32" "--f32"; do
  echo "posenc generate --chat ${flags:-(quantized, f16 cache)}:"
  # shellcheck disable=SC2086
  target/release/posenc generate --chat --temperature 0 --max-tokens "$tokens" $flags "$question" 2>/dev/null
  echo
done
