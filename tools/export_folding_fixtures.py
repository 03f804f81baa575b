"""Models whose shape arithmetic only folds symbolically (issue 12 item 2), for
crates/cli/tests/shape_folding.rs.

`.venv/bin/python tools/export_folding_fixtures.py` (torch, einops and onnx; about 20 s) writes
tests/fixtures/folding/:
- `pair_{torchscript,dynamo}.onnx`: an einops rearrange of an AlphaFold-3 style pair tensor
  `z[2, N, N, 8]` plus `z.reshape(b, n ** 2 // 4, 4, c)` (TorchScript emits `Pow` on the shape value).
- `swin_{torchscript,dynamo}.onnx`: a Swin window partition of `x[1, H, W, 8]` that pads H and W up to
  a multiple of the window 4 with `Mod` and returns `arange(0, Hp, 4)` (`Range` with a symbolic limit).
- `pow_reshape.onnx`: built with onnx.helper in the dynamo exporter's style: the Reshape target is
  `Concat(Reshape(Div(Pow(N, 2), 4)), ...)` on 0-d shape values.
"""

import os

import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange
from onnx import TensorProto, helper

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "tests/fixtures/folding")


class Pair(nn.Module):
    def forward(self, z):
        b, n, _, c = z.shape
        y = rearrange(z, "b i j (h d) -> b h (i j) d", h=4)
        w = z.reshape(b, (n**2) // 4, 4, c)
        return y * 2.0, w + 1.0


class Swin(nn.Module):
    ws = 4

    def forward(self, x):
        b, h, w, c = x.shape
        ws = self.ws
        ph = (ws - h % ws) % ws
        pw = (ws - w % ws) % ws
        x = F.pad(x, (0, 0, 0, pw, 0, ph))
        hp, wp = h + ph, w + pw
        x = x.view(b, hp // ws, ws, wp // ws, ws, c).permute(0, 1, 3, 2, 4, 5)
        x = x.reshape(-1, ws * ws, c)
        return x + 1.0, torch.arange(0, hp, ws)


def export(name, module, args, names, outs, axes, dims):
    for dynamo in (False, True):
        path = os.path.join(OUT, f"{name}_{'dynamo' if dynamo else 'torchscript'}.onnx")
        if dynamo:
            torch.onnx.export(module, args, path, input_names=names, output_names=outs,
                              dynamic_shapes=dims, dynamo=True, external_data=False)
        else:
            torch.onnx.export(module, args, path, input_names=names, output_names=outs,
                              dynamic_axes=axes, dynamo=False, opset_version=17)
        m = onnx.load(path)
        onnx.checker.check_model(m)
        onnx.save(m, path)
        print(path, sorted({n.op_type for n in m.graph.node}))


def pow_reshape():
    i64 = TensorProto.INT64
    c = lambda name, v: helper.make_tensor(name, i64, [] if not isinstance(v, list) else [len(v)], v if isinstance(v, list) else [v])
    nodes = [
        helper.make_node("Shape", ["z"], ["s1"], start=1, end=2),
        helper.make_node("Squeeze", ["s1"], ["n"]),
        helper.make_node("Pow", ["n", "two"], ["n2"]),
        helper.make_node("Div", ["n2", "four"], ["q"]),
        helper.make_node("Reshape", ["q", "one_d"], ["q1"]),
        helper.make_node("Concat", ["b", "q1", "rest"], ["target"], axis=0),
        helper.make_node("Reshape", ["z", "target"], ["r"]),
        helper.make_node("Mul", ["r", "scale"], ["y"]),
    ]
    inits = [c("two", 2), c("four", 4), c("one_d", [1]), c("b", [2]), c("rest", [4, 8]),
             helper.make_tensor("scale", TensorProto.FLOAT, [], [2.0])]
    g = helper.make_graph(
        nodes, "pow_reshape",
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, "N", "N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "Q", 4, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, os.path.join(OUT, "pow_reshape.onnx"))


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    n = torch.export.Dim("N", min=2, max=512)
    export("pair", Pair(), (torch.randn(2, 6, 6, 8),), ["z"], ["y", "w"],
           {"z": {1: "N", 2: "N"}}, {"z": {1: n, 2: n}})
    h, w = torch.export.Dim("H", min=2, max=512), torch.export.Dim("W", min=2, max=512)
    export("swin", Swin(), (torch.randn(1, 7, 10, 8),), ["x"], ["win", "idx"],
           {"x": {1: "H", 2: "W"}}, {"x": {1: h, 2: w}})
    pow_reshape()


if __name__ == "__main__":
    main()
