#!/bin/bash
# check.sh STEM: inspect, run --compare, estimate at run dims, optimize at half, planned run
M=/tmp/probe/$1.onnx; IN=/tmp/probe/$1_in.npz; REF=/tmp/probe/$1_ort.npz
MP="$(cd "$(dirname "$0")/../.." && pwd)/target/release/memplan"
ins=$($MP inspect $M --json 2>&1) || { echo "$1 inspect ERR: $(echo "$ins" | head -2)"; exit; }
nun=$(echo "$ins" | python3 -c "import json,sys; r=json.load(sys.stdin); u=r['unsupported']; print(len(u)); [print(' ', x['node'], x['op'], x['reason'][:150]) for x in u if not x['reason'].startswith('needs unknown')][:5]" | head -6)
echo "$1 unsupported: $nun"
run=$($MP run $M --inputs-npz $IN --compare $REF --json 2>&1) || { echo "$1 run ERR: $(echo "$run" | head -3)"; exit; }
echo "$run" | python3 -c "import json,sys; r=json.load(sys.stdin); print('  run peak', r['peak_bytes'], 'dims', r['dims'], 'mismatch', r['mismatches'][:2], 'scratch', r['scratch_mismatches'][:2])"
D=$(echo "$run" | python3 -c "import json,sys; r=json.load(sys.stdin); print(' '.join(f'--dim={k}={v}' for k,v in r['dims'].items()))")
est=$($MP estimate $M $D --json 2>&1) || { echo "$1 estimate ERR: $(echo "$est" | head -2)"; exit; }
echo "$est" | python3 -c "import json,sys; r=json.load(sys.stdin); print('  estimate', r['peak_bytes'])"
B=$(echo "$est" | python3 -c "import json,sys; r=json.load(sys.stdin); print(r['resident_bytes'] + (r['peak_bytes']-r['resident_bytes'])//2)")
opt=$($MP optimize $M $D --budget $B -o /tmp/probe/$1.opt.onnx --plan-out /tmp/probe/$1.plan.json --json 2>&1); rc=$?
[ $rc = 0 -o $rc = 3 ] || { echo "$1 optimize ERR rc=$rc: $(echo "$opt" | head -2)"; exit; }
echo "$opt" | python3 -c "import json,sys; r=json.load(sys.stdin); print('  planned', r['peak_bytes_after'], 'fits', r['fits'])"
$MP run $M --inputs-npz $IN --out /tmp/probe/$1.out.npz $D --json > /dev/null 2>&1
pr=$($MP run /tmp/probe/$1.opt.onnx --inputs-npz $IN --plan /tmp/probe/$1.plan.json --compare /tmp/probe/$1.out.npz --exact $D --json 2>&1) || { echo "$1 planned ERR: $(echo "$pr" | head -2)"; exit; }
echo "$pr" | python3 -c "import json,sys; r=json.load(sys.stdin); print('  planned run', r['peak_bytes'], 'mismatch', r['mismatches'][:2])"
