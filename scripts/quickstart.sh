#!/usr/bin/env bash
# Train Timer-XL on generated data with 2 processes on CPU (or one per GPU present) and print the metrics.
# Nothing to download: the synthetic CSV is written to dataset/synthetic/ on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
gpus=$(python -c "import torch; print(torch.cuda.device_count())")
NGPU=${NGPU:-$([ "$gpus" -gt 0 ] && echo "$gpus" || echo 2)}
source scripts/launch.sh

launch --model timer_xl --model_id quickstart --data synthetic \
  --seq_len 672 --input_token_len 96 --output_token_len 96 --test_pred_len 96 \
  --d_model 256 --d_ff 512 --n_heads 8 --e_layers 2 --use_norm --valid_last \
  --batch_size 32 --learning_rate 0.0005 --lradj cosine --train_epochs 5 "$@"

echo "metrics:"
cat "$RESULTS"/quickstart_timer_xl_synthetic_*/tp96/metrics.json
