"""Exports the random-op fixtures in tests/fixtures/random: a small module with dropout left in the
graph in training mode (Dropout), a Boltz-style p = 0 mask drawn by RandomUniformLike, and a
RandomNormalLike term, with both torch exporters (TorchScript and dynamo), dims B and N symbolic.

Usage: python tools/export_random_fixtures.py [OUT_DIR]
"""
import os
OUT = os.path.abspath(os.sys.argv[1] if len(os.sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../tests/fixtures/random"))
import torch, torch.nn.functional as F, onnx
torch.manual_seed(0)
class M(torch.nn.Module):
    def __init__(s):
        super().__init__(); s.l = torch.nn.Linear(16, 16)
    def forward(s, x):
        h = F.dropout(s.l(x), 0.25, training=True)          # Dropout in training mode
        m = (torch.rand_like(h) >= 0.0).to(h.dtype)          # RandomUniformLike mask, p = 0 (Boltz-style)
        return h * m + torch.randn_like(h) * 0.0
m = M().eval()
x = torch.randn(2, 5, 16)
torch.onnx.export(m, (x,), OUT + "/dropout_torchscript.onnx", dynamo=False, input_names=["x"], output_names=["y"],
                  dynamic_axes={"x": {0: "B", 1: "N"}}, opset_version=17)
try:
    B = torch.export.Dim("B"); N = torch.export.Dim("N")
    torch.onnx.export(m, (x,), OUT + "/dropout_dynamo.onnx", dynamo=True, input_names=["x"], output_names=["y"],
                      dynamic_shapes={"x": {0: B, 1: N}}, external_data=False)
except Exception as e:
    print("dynamo failed:", e)
for f in [OUT + "/dropout_torchscript.onnx", OUT + "/dropout_dynamo.onnx"]:
    try:
        g = onnx.load(f).graph
        print(f, [n.op_type for n in g.node])
    except Exception as e:
        print(f, e)
