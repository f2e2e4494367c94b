#!/usr/bin/env bash
# Time-MoE (Shi et al., ICLR 2025): a released checkpoint (Maple728/TimeMoE-50M or -200M) tested zero-shot on ETTh1
# as the official run_eval.py does: context 512, 1024, 2048, 3072 for horizons 96, 192, 336, 720, the forecast the
# official generate's, each channel a series of its own. The published numbers (as Timer-XL's Table 13 prints them)
# are in scripts/reproduce/paper_results.csv (protocol zero_shot, checkpoint TimeMoE-50M / TimeMoE-200M): the run's
# --des is the folder's name, so name the folder after the checkpoint.
#   huggingface-cli download Maple728/TimeMoE-50M --local-dir ckpt/TimeMoE-50M      # once
#   TIMEMOE=ckpt/TimeMoE-50M bash scripts/zero_shot/time_moe_zero_shot.sh
#   python -m analysis.report ./results                                            # the gaps
# Extra arguments are passed to run.py (docs/foundation.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/launch.sh
: "${TIMEMOE:?set TIMEMOE to the folder of Maple728/TimeMoE-50M or -200M (huggingface-cli download ... --local-dir DIR)}"

declare -A context=([96]=512 [192]=1024 [336]=2048 [720]=3072)  # run_eval.py's context for each horizon
horizons=(${HORIZONS:-96 192 336 720})  # HORIZONS="96" runs one
for pred_len in "${horizons[@]}"; do
  launch --model time_moe --pretrained "$TIMEMOE" --is_training 0 --nonautoregressive \
  --des "$(basename "$TIMEMOE")" --model_id ETTh1 --data ETTh1 --root_path "$DATA_ROOT/ETT-small/" \
  --seq_len "${context[$pred_len]:-$((4 * pred_len))}" --output_token_len "$pred_len" --batch_size 32 "$@"
done
