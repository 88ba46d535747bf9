#!/usr/bin/env bash
# Side by side with the authors' code: FedAvg and FedGKD against CGCL-codes/FedGKD, FedAvg and
# FedGen against zhuangdizhu/FedGen, on the same data, partition, initial weights and cohorts,
# full-batch local steps. See README.md here for what it runs and what it found.
#
#   benchmarks/crosscheck/side_by_side.sh OUT CIFAR10_TARBALL FEDGKD_CLONE FEDGEN_CLONE TORCH_PY
#
# OUT: a fresh folder; CIFAR10_TARBALL: cifar10-jpeg.tar.gz (what --dataset=cifar10 reads);
# FEDGKD_CLONE, FEDGEN_CLONE: clones of the two repositories; TORCH_PY: a python with torch and
# numpy (not this environment's: our side runs with `python`). Ends with summarize.py's files.
set -euo pipefail
OUT=$1; TARBALL=$2; GKD=$3; GEN=$4; TORCH_PY=$5
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
{ echo "torch $("$TORCH_PY" -c 'import torch; print(torch.__version__)')"
  echo "jax $(python -c 'import jax; print(jax.__version__)')"
  echo "fedgkd_commit $(git -C "$GKD" rev-parse HEAD)"
  echo "fedgen_commit $(git -C "$GEN" rev-parse HEAD)"; } > "$OUT/versions.txt"

# --- FedGKD's code: ResNet-8 (GroupNorm, 16 channels per group), 200 CIFAR-10 images -------
python "$HERE/small_data.py" cifar10 "$OUT/cifar.npz" --tarball="$TARBALL"
RUN="--dataset=npz:$OUT/cifar.npz --model=resnet8 --gn_group_size=16 --init=torch
  --num_clients=10 --clients_per_round=3 --rounds=5 --local_epochs=5 --batch_size=20
  --lr=0.05 --local_momentum=0.9 --weight_decay=1e-5 --weight_decay_skip=norm_except_shortcut
  --clip_grad_norm=10 --normalize_mean=0.4914,0.4822,0.4465
  --normalize_std=0.2023,0.1994,0.2010 --weighting=uniform --val_fraction=0"
GKD_FLAGS="--gkd_gamma=0.2 --gkd_buffer=5 --kd_temperature=1 --kd_tau2
  --gkd_buffer_start=aggregated"
G=$OUT/fedgkd
# shellcheck disable=SC2086
python "$HERE/export.py" --dir="$G/ours_fedavg" $RUN --algo=fedavg --partition=feddf \
  --dirichlet_alpha=0.1
REPLAY="--partition=file:$G/ours_fedavg/partition.json --cohorts=file:$G/ours_fedavg/cohorts.json
  --init_params=$G/ours_fedavg/init.npz"
# shellcheck disable=SC2086
python "$HERE/export.py" --dir="$G/ours_fedgkd" $RUN $REPLAY --algo=fedgkd $GKD_FLAGS
THEIRS="--arch resnet8 --complex_arch master=resnet8,worker=resnet8 --experiment xc
  --group_norm_num_groups 16 --data cifar10 --pin_memory False --num_workers 0
  --batch_size 20 --partition_data origin --train_data_ratio 1 --val_data_ratio 0
  --n_clients 10 --participation_ratio 0.3 --n_comm_rounds 5 --local_n_epochs 5
  --world_conf 0,0,1,1,100 --on_cuda False --optimizer sgd --lr 0.05 --local_prox_term 0
  --lr_warmup False --lr_scheduler MultiStepLR
  --lr_decay 0.1 --weight_decay 1e-5 --use_nesterov False --momentum_factor 0.9
  --lr_warmup_epochs 5 --lr_warmup_epochs_upper_bound 150
  --track_time True --pn_normalize True --same_seed_process False --projection False"
for seed in 7 8; do  # their seed moves only the order of examples inside the one batch
  for method in fedavg fedgkd; do
    coef=0; [ $method = fedgkd ] && coef=0.1
    # shellcheck disable=SC2086
    "$TORCH_PY" "$HERE/fedgkd_side.py" --code="$GKD" --export="$G/ours_fedavg" \
      --data="$OUT/cifar.npz" --out="$G/theirs_${method}_s$seed" -- $THEIRS \
      --method $method --distillation_coefficient $coef --buffer_length 5 --avg_param True \
      --temperature 1 --loss_type kl --manual_seed $seed --checkpoint "$G/ckpt" \
      --job_id "$G/jobs" --port $((50020 + seed)) > "$G/theirs_${method}_s$seed.log" 2>&1
  done
done

# --- FedGen's code: our `mlp`, 1,000 Fashion-MNIST images of the embedded subset -----------
python "$HERE/small_data.py" embedded "$OUT/fmnist.npz" --train_per_class=100 \
  --test_per_class=20
RUN="--dataset=npz:$OUT/fmnist.npz --model=mlp --num_clients=10 --clients_per_round=3
  --rounds=5 --local_epochs=10 --batch_size=100 --lr=0.01 --val_fraction=0 --init=torch"
N=$OUT/fedgen
# shellcheck disable=SC2086
python "$HERE/export.py" --dir="$N/ours_fedavg" $RUN --algo=fedavg --partition=feddf \
  --dirichlet_alpha=0.1 --fedgen_json
REPLAY="--partition=file:$N/ours_fedavg/partition.json --cohorts=file:$N/ours_fedavg/cohorts.json
  --init_params=$N/ours_fedavg/init.npz"
THEIRS="--batch_size 100 --learning_rate 0.01 --num_glob_iters 5 --local_epochs 10
  --num_users 3 --ensemble_lr 3e-4"
for seed in 0 1 2; do
  # shellcheck disable=SC2086
  python "$HERE/export.py" --dir="$N/ours_fedgen_s$seed" $RUN $REPLAY --algo=fedgen \
    --seed=$seed
  for algorithm in FedAvg FedGen; do
    [ $algorithm = FedAvg ] && [ $seed = 2 ] && continue  # FedAvg: seed 0 and its reorder
    # shellcheck disable=SC2086
    "$TORCH_PY" "$HERE/fedgen_side.py" --code="$GEN" --export="$N/ours_fedavg" \
      --out="$N/theirs_${algorithm,,}_s$seed" --algorithm=$algorithm --seed=$seed $THEIRS \
      > "$N/theirs_${algorithm,,}_s$seed.log" 2>&1
  done
done
# The diagnostic: their FedAvg with every user's learning rate kept (README.md, FedGen).
# shellcheck disable=SC2086
"$TORCH_PY" "$HERE/fedgen_side.py" --code="$GEN" --export="$N/ours_fedavg" \
  --out="$N/theirs_fedavg_nodecay" --algorithm=FedAvg --seed=0 --no_user_lr_decay $THEIRS \
  > "$N/theirs_fedavg_nodecay.log" 2>&1
python "$HERE/summarize.py" "$OUT"
