"""Export small random-weight models from packages the corpus does not use (transformers'
Wav2Vec2, BART, Qwen2, Phi, Gemma, SegFormer, CLIP; torch's LSTM/GRU; torchvision's FCN, DeepLabV3,
an R3D-style video net) with both torch ONNX exporters, for checking memplan on files it has not
seen (BENCHMARKS.md, "Fresh exports").
usage: python bench/fresh_exports.py NAME [legacy|dynamo|both]   (OUT=dir, default target/fresh)
Writes $OUT/NAME_{legacy,dynamo}.onnx
"""
import sys, os, traceback, time
import torch
import torch.nn as nn

torch.manual_seed(0)
OUT = os.environ.get("OUT", "target/fresh")
Dim = torch.export.Dim


class Wrap(nn.Module):
    """Return plain tensors (first output / tuple) from HF models."""
    def __init__(self, m, keys):
        super().__init__()
        self.m = m
        self.keys = keys

    def forward(self, x):
        o = self.m(x)
        return tuple(getattr(o, k) for k in self.keys)


def wav2vec2():
    from transformers import Wav2Vec2Config, Wav2Vec2Model
    cfg = Wav2Vec2Config(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=256, conv_dim=(32, 32, 32), conv_stride=(5, 2, 2),
                         conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
                         num_conv_pos_embedding_groups=4, do_stable_layer_norm=False,
                         feat_extract_norm="group", apply_spec_augment=False)
    m = Wav2Vec2Model(cfg).eval()
    x = torch.randn(1, 16000)
    return (Wrap(m, ["last_hidden_state"]), (x,), ["audio"], ["last_hidden_state"],
            {"audio": {1: "L"}}, {"audio": {1: Dim("L", min=400, max=100000)}})


def bart():
    from transformers import BartConfig, BartModel
    cfg = BartConfig(vocab_size=1000, d_model=128, encoder_layers=2, decoder_layers=2,
                     encoder_attention_heads=2, decoder_attention_heads=2,
                     encoder_ffn_dim=256, decoder_ffn_dim=256, max_position_embeddings=1024)
    m = BartModel(cfg).eval()
    ids = torch.randint(0, 1000, (1, 32))
    dids = torch.randint(0, 1000, (1, 16))

    class W(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, input_ids, decoder_input_ids):
            o = self.m(input_ids=input_ids, decoder_input_ids=decoder_input_ids, use_cache=False)
            return o.last_hidden_state, o.encoder_last_hidden_state
    return (W(), (ids, dids), ["input_ids", "decoder_input_ids"], ["last_hidden_state", "encoder_last_hidden_state"],
            {"input_ids": {1: "S"}, "decoder_input_ids": {1: "T"}},
            {"input_ids": {1: Dim("S", min=2, max=1000)}, "decoder_input_ids": {1: Dim("T", min=2, max=1000)}})


class LastHidden(nn.Module):
    """A decoder's `last_hidden_state` for `input_ids`, without a cache."""
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m(input_ids=input_ids, use_cache=False).last_hidden_state


def decoder(cfg_cls, model_cls, **extra):
    """A 2-layer, hidden-128 decoder of `model_cls` over `input_ids` [1, S]."""
    cfg = cfg_cls(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                  num_attention_heads=4, max_position_embeddings=2048, **extra)
    m = model_cls(cfg).eval()
    ids = torch.randint(0, 1000, (1, 32))
    return (LastHidden(m), (ids,), ["input_ids"], ["last_hidden_state"],
            {"input_ids": {1: "S"}}, {"input_ids": {1: Dim("S", min=2, max=2000)}})


def qwen2():
    from transformers import Qwen2Config, Qwen2Model
    return decoder(Qwen2Config, Qwen2Model, num_key_value_heads=2)


def phi():
    from transformers import PhiConfig, PhiModel
    return decoder(PhiConfig, PhiModel)


def gemma():
    from transformers import GemmaConfig, GemmaModel
    return decoder(GemmaConfig, GemmaModel, num_key_value_heads=1, head_dim=32)


def segformer():
    from transformers import SegformerConfig, SegformerModel
    cfg = SegformerConfig(num_encoder_blocks=4, depths=[1, 1, 1, 1], sr_ratios=[8, 4, 2, 1],
                          hidden_sizes=[16, 32, 64, 128], num_attention_heads=[1, 2, 2, 4],
                          mlp_ratios=[2, 2, 2, 2], decoder_hidden_size=64)
    m = SegformerModel(cfg).eval()
    x = torch.randn(1, 3, 256, 256)
    return (Wrap(m, ["last_hidden_state"]), (x,), ["pixel_values"], ["last_hidden_state"],
            {"pixel_values": {2: "H", 3: "W"}},
            {"pixel_values": {2: Dim("H", min=64, max=1024), 3: Dim("W", min=64, max=1024)}})


def rnn():
    class R(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(64, 64, num_layers=2, bidirectional=True)
            self.gru = nn.GRU(128, 32, num_layers=2, bidirectional=True)

        def forward(self, x):
            y, _ = self.lstm(x)
            z, h = self.gru(y)
            return z, h
    x = torch.randn(20, 1, 64)
    return (R().eval(), (x,), ["x"], ["z", "h"], {"x": {0: "T"}}, {"x": {0: Dim("T", min=2, max=5000)}})


class SegOut(nn.Module):
    """A torchvision segmentation model's `out` map."""
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(x)["out"]


def fcn():
    import torchvision
    m = torchvision.models.segmentation.fcn_resnet50(weights=None, weights_backbone=None, num_classes=21,
                                                     aux_loss=False).eval()
    x = torch.randn(1, 3, 256, 256)
    return (SegOut(m), (x,), ["x"], ["out"], None, None)


def deeplab():
    import torchvision
    m = torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                                      num_classes=21, aux_loss=False).eval()
    x = torch.randn(1, 3, 256, 256)
    return (SegOut(m), (x,), ["x"], ["out"], {"x": {2: "H", 3: "W"}}, {"x": {2: Dim.DYNAMIC, 3: Dim.DYNAMIC}})


def r3d():
    import torchvision
    from torchvision.models.video.resnet import VideoResNet, BasicBlock, Conv3DSimple, BasicStem
    # r3d_18 topology with one block per stage (r3d_18 itself is 133 MB)
    m = VideoResNet(BasicBlock, [Conv3DSimple] * 4, [1, 1, 1, 1], BasicStem, num_classes=400).eval()
    x = torch.randn(1, 3, 8, 112, 112)
    return (m, (x,), ["clip"], ["logits"], {"clip": {2: "T"}}, {"clip": {2: Dim.DYNAMIC}})


def clip():
    from transformers import CLIPVisionConfig, CLIPVisionModel
    cfg = CLIPVisionConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                           num_attention_heads=2, image_size=224, patch_size=16)
    m = CLIPVisionModel(cfg).eval()
    x = torch.randn(1, 3, 224, 224)
    return (Wrap(m, ["last_hidden_state", "pooler_output"]), (x,), ["pixel_values"],
            ["last_hidden_state", "pooler_output"], {"pixel_values": {0: "B"}},
            {"pixel_values": {0: Dim("B", min=1, max=64)}})


class Encoded(nn.Module):
    """An encoder's `last_hidden_state` for `input_ids`."""
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m(input_ids=input_ids).last_hidden_state


def deberta():
    """DeBERTa-v2 with relative attention (c2p and p2c), 32 position buckets, at most 64 relative
    positions: the relative positions are read along the query axis by one term and, transposed,
    along the key axis by the other (BENCHMARKS "DeBERTa's relative positions as trees")."""
    from transformers import DebertaV2Config, DebertaV2Model
    cfg = DebertaV2Config(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                          intermediate_size=256, max_position_embeddings=4096, relative_attention=True,
                          position_buckets=32, max_relative_positions=64, pos_att_type=["c2p", "p2c"])
    m = DebertaV2Model(cfg).eval()
    ids = torch.randint(0, 1000, (1, 64))
    return (Encoded(m), (ids,), ["input_ids"], ["last_hidden_state"], {"input_ids": {1: "S"}},
            {"input_ids": {1: Dim("S", min=2, max=4096)}})


MODELS = dict(deberta=deberta, wav2vec2=wav2vec2, bart=bart, qwen2=qwen2, phi=phi, gemma=gemma, segformer=segformer, rnn=rnn,
              fcn=fcn, deeplab=deeplab, r3d=r3d, clip=clip)

if __name__ == "__main__":
    name = sys.argv[1]
    which = sys.argv[2] if len(sys.argv) > 2 else "both"
    os.makedirs(OUT, exist_ok=True)
    mod, args, inames, onames, dyn_axes, dyn_shapes = MODELS[name]()
    mod = mod.eval()  # wrappers default to training mode; dynamo export then emits training Dropout
    with torch.no_grad():
        if which in ("legacy", "both"):
            f = f"{OUT}/{name}_legacy.onnx"
            t = time.time()
            try:
                torch.onnx.export(mod, args, f, dynamo=False, opset_version=17, input_names=inames,
                                  output_names=onames, dynamic_axes=dyn_axes)
                print("OK legacy", f, os.path.getsize(f), f"{time.time()-t:.1f}s")
            except Exception:
                traceback.print_exc()
                print("FAIL legacy", name)
        if which in ("dynamo", "both"):
            f = f"{OUT}/{name}_dynamo.onnx"
            t = time.time()
            try:
                ds = None
                if dyn_shapes is not None:
                    ds = tuple(dyn_shapes.get(n) for n in inames)
                ep = torch.onnx.export(mod, args, dynamo=True, dynamic_shapes=ds, input_names=inames,
                                       output_names=onames)
                ep.save(f, external_data=False)
                print("OK dynamo", f, os.path.getsize(f), f"{time.time()-t:.1f}s")
            except Exception:
                traceback.print_exc()
                print("FAIL dynamo", name)
