# DeBERTa (fresh exports, /tmp/fresh; bench/fresh_exports.py makes them) at one S, budget 0.15x:
# main at 6777988 (old) against this tree (new); planned, measured, bit-identity, run times (2 threads,
# median of R alternating runs). Usage: deberta_trees.py S R
import json, subprocess, sys, statistics
S = sys.argv[1]; R = int(sys.argv[2]) if len(sys.argv) > 2 else 5
import os
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
B = {'old': os.environ.get('OLD', os.path.join(ROOT, 'target/base/release/memplan')), 'new': os.path.join(ROOT, 'target/release/memplan')}
D = os.environ.get('WORK', '/tmp/debm'); os.makedirs(D, exist_ok=True)
def js(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=os.environ.get('FRESH', '/tmp/fresh'))
    try: return r.returncode, json.loads(r.stdout)
    except Exception: return r.returncode, {'err': r.stderr[-400:]}
rows = []
for e in ['deberta_dynamo', 'deberta_legacy']:
    m = f'{e}.onnx'
    _, est = js([B['new'], 'estimate', m, '--dim', f'S={S}', '--json'])
    peak = est['peak_bytes']; bud = peak * 15 // 100
    js([B['new'], 'run', m, '--dim', f'S={S}', '--random', '--threads', '2', '--out', f'{D}/{e}.ref.npz', '--json'])
    res = {}
    for b in ['old', 'new']:
        code, rep = js([B[b], 'optimize', m, '--dim', f'S={S}', '--budget', f'{bud}B', '-o', f'{D}/{e}.{b}.onnx', '--plan-out', f'{D}/{e}.{b}.json', '--json'])
        _, run = js([B['new'], 'run', f'{D}/{e}.{b}.onnx', '--plan', f'{D}/{e}.{b}.json', '--dim', f'S={S}', '--random', '--threads', '2', '--compare', f'{D}/{e}.ref.npz', '--exact', '--json'])
        res[b] = dict(code=code, planned=rep.get('peak_bytes_after'), measured=run.get('peak_bytes'), mism=run.get('mismatches'), compared=run.get('compared'))
    times = {'plain': [], 'old': [], 'new': []}
    for _ in range(R):
        for k in ['plain', 'old', 'new']:
            if k == 'plain':
                _, r = js([B['new'], 'run', m, '--dim', f'S={S}', '--random', '--threads', '2', '--json'])
            else:
                _, r = js([B['new'], 'run', f'{D}/{e}.{k}.onnx', '--plan', f'{D}/{e}.{k}.json', '--dim', f'S={S}', '--random', '--threads', '2', '--json'])
            times[k].append(r['seconds'])
    med = {k: statistics.median(v) for k, v in times.items()}
    for b in ['old', 'new']:
        r = res[b]
        print(f"| {e} | S={S} | {b} | {peak/2**20:.1f} MiB | {bud/2**20:.1f} MiB | {r['planned'] and r['planned']/2**20:.1f} MiB | {r['measured']/2**20:.1f} MiB | {r['measured']/peak:.3f} | {'yes' if r['code']==0 else 'no (exit %d)'%r['code']} | {med['plain']*1000:.0f} | {med[b]*1000:.0f} | {med[b]/med['plain']:.2f} | {'bit-identical' if r['mism']==[] or r['mism']==0 else r['mism']} |", flush=True)
