#!/usr/bin/env bash
# scripts/train-loss-compare.py on hand-made loss logs: exact mode passes reduction-order differences and
# fails a step off by more than rtol, naming it; window mode compares 10-step means, so one noisy step
# inside a window passes where a shifted curve fails; short and broken logs exit 2.
# Usage: train_loss_compare_test.sh SOURCE_DIR
set -uo pipefail
src=$1
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
tool=$src/scripts/train-loss-compare.py

# base: loss 5 - 0.01 s, norm 2; near: the same to 1e-7; off: step 2's loss 1e-3 off; spike: one step
# 5% high inside its window (the mean moves 0.5%); shifted: the whole curve 2% high.
python3 - "$dir" <<'PY'
import sys
d = sys.argv[1]
curves = {
    "base": lambda s, l: (l, 2.0),
    "near": lambda s, l: (l * (1 + 1e-7), 2.0 * (1 - 1e-7)),
    "off": lambda s, l: (l * (1.001 if s == 2 else 1), 2.0),
    "spike": lambda s, l: (l * (1.05 if s == 13 else 1), 2.0),
    "shifted": lambda s, l: (l * 1.02, 2.0),
}
for name, f in curves.items():
    with open(f"{d}/{name}", "w") as out:
        for s in range(30):
            loss, norm = f(s, 5 - 0.01 * s)
            out.write(f"{s} {loss!r} {norm!r}\n")
PY

field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }

out=$(python3 "$tool" "$dir/base" "$dir/near" --exact-steps 5 --rtol 1e-4) || fail "near: exit $?: $out"
[[ $(field "$out" pass) == True ]] || fail "near: $out"
out=$(python3 "$tool" "$dir/base" "$dir/off" --exact-steps 5 --rtol 1e-4)
(( $? == 1 )) || fail "off: exit status: $out"
[[ $(field "$out" loss_worst_step) == 2 ]] || fail "off: worst step: $out"
out=$(python3 "$tool" "$dir/base" "$dir/spike" --window 10 --window-rtol 0.01) || fail "spike: exit $?: $out"
[[ $(field "$out" window_worst_start) == 10 ]] || fail "spike: worst window: $out"
out=$(python3 "$tool" "$dir/base" "$dir/shifted" --window 10 --window-rtol 0.01)
(( $? == 1 )) || fail "shifted: exit status: $out"

head -3 "$dir/base" > "$dir/short"
python3 "$tool" "$dir/base" "$dir/short" --exact-steps 5 > "$dir/o"
(( $? == 2 )) && grep -qF "fewer than 5 common steps" "$dir/o" || fail "short log: $(cat "$dir/o")"
echo "0 x" > "$dir/broken"
python3 "$tool" "$dir/base" "$dir/broken" --exact-steps 1 > "$dir/o"
(( $? == 2 )) && grep -qF "could not convert" "$dir/o" || fail "broken log: $(cat "$dir/o")"
echo "0" > "$dir/broken"
python3 "$tool" "$dir/base" "$dir/broken" --exact-steps 1 > "$dir/o"
(( $? == 2 )) && grep -qF "broken:1: expected 'step loss [grad_norm]'" "$dir/o" || fail "one-column log: $(cat "$dir/o")"
echo "train_loss_compare: ok"
