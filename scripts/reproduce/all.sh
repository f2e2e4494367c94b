#!/usr/bin/env bash
# Every reproduction (scripts/reproduce/paper.sh), then one report of all results beside the papers' numbers.
set -euo pipefail
cd "$(dirname "$0")/../.."
for model in dlinear patchtst itransformer timer_xl nlinear sparsetsf segrnn cyclenet crossformer; do
  bash scripts/reproduce/paper.sh "$model" "$@"
done
