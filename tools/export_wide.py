#!/usr/bin/env python3
"""Export the wide corpus (tests/wide): real models from public PyPI packages, random weights.

Every model is built from its package's own config/constructor classes with a small config and a
fixed seed (nothing is downloaded), and exported with both torch exporters where they work:

- `models/<stem>.onnx`: `torch.onnx.export(dynamo=True)`, opset 18, weights inline;
- `models/<stem>.legacy.onnx`: the TorchScript exporter (`dynamo=False`), opset 18.

Symbolic dims are named (B, S, H, W, N, T, L) through `dynamic_axes` (both exporters keep the names).
Per model, two small input sizes: `inputs/<stem>_<tag>.npz` (valid ids, masks, images) and the
onnxruntime outputs for them, `ort/<stem>[.legacy]_<tag>.npz`. `manifest.json` records per model the
package and version, class, config, exporter results (the first line of the error where one failed),
symbolic dims and their values per size, op histogram and node count.

    .venv/bin/python tools/export_wide.py             # everything not yet exported
    .venv/bin/python tools/export_wide.py --only t5_encoder --force
    .venv/bin/python tools/export_wide.py --manifest  # only reassemble manifest.json

Each model is exported in its own subprocess (torch export is slow and leaks memory); results are
cached per model in `tests/wide/.frag/<stem>.json` (not checked in) so a rerun only does what's missing.
"""

from __future__ import annotations

import argparse
import collections
import importlib.metadata as md
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WIDE = ROOT / "tests" / "wide"
FRAG = WIDE / ".frag"
OPSET = 18
MAX_BYTES = 10 * 1024 * 1024
SEED = 20251125


# ---------------------------------------------------------------------------------------------
# Input generators (numpy, deterministic per model and size)


def _rng(stem: str, tag: str):
    import numpy as np

    h = sum((i + 1) * ord(c) for i, c in enumerate(f"{stem}/{tag}"))
    return np.random.default_rng(SEED + h)


def ids(vocab, lo=0):
    def gen(rng, d):
        return rng.integers(lo, vocab, size=(d["B"], d["S"]), dtype="int64")

    return gen


def padmask(dim="S"):
    """Ones, except the last row's final quarter (padding) when B > 1."""

    def gen(rng, d):
        import numpy as np

        m = np.ones((d["B"], d[dim]), dtype="int64")
        if d["B"] > 1:
            m[-1, d[dim] - d[dim] // 4 :] = 0
        return m

    return gen


def normal(*shape):
    """Float input ~ N(0, 1); entries of `shape` are ints or dim names."""

    def gen(rng, d):
        return rng.standard_normal(tuple(d[s] if isinstance(s, str) else s for s in shape)).astype(
            "float32"
        )

    return gen


def pair_mask(rng, d):
    import numpy as np

    m = np.ones((d["B"], d["N"]), dtype="float32")
    if d["B"] > 1:
        m[-1, d["N"] - 3 :] = 0
    return (m[:, :, None] * m[:, None, :]).astype("float32")


# ---------------------------------------------------------------------------------------------
# Model builders. Each returns a dict:
#   module, inputs [(name, gen)], outputs [names], dyn {input: {axis: sym}}, export (dims for the
#   example inputs), sizes [(tag, dims)], package, cls, config (summary dict), note (optional)

TEXT_SIZES = [("16", {"B": 1, "S": 16}), ("24", {"B": 2, "S": 24})]
TEXT_EXPORT = {"B": 2, "S": 20}
TEXT_DYN = {"input_ids": {0: "B", 1: "S"}, "attention_mask": {0: "B", 1: "S"}}
IMG_SIZES = [("64", {"B": 1, "H": 64, "W": 64}), ("96", {"B": 2, "H": 96, "W": 64})]
IMG_EXPORT = {"B": 2, "H": 64, "W": 96}
IMG_DYN = {"pixel_values": {0: "B", 2: "H", 3: "W"}}


def _hf_small(cfg_cls, **kw):
    cfg = cfg_cls(**kw)
    for k in ("hidden_dropout_prob", "attention_probs_dropout_prob", "dropout", "attention_dropout"):
        if hasattr(cfg, k):
            setattr(cfg, k, 0.0)
    return cfg


def _summary(cfg, keys):
    return {k: getattr(cfg, k) for k in keys if hasattr(cfg, k)}


TEXT_KEYS = [
    "vocab_size",
    "hidden_size",
    "d_model",
    "num_hidden_layers",
    "num_layers",
    "num_attention_heads",
    "num_heads",
    "num_key_value_heads",
    "intermediate_size",
    "d_ff",
    "dim",
    "hidden_dim",
    "n_layers",
    "n_heads",
    "embedding_size",
    "position_embedding_type",
    "relative_attention_num_buckets",
    "sliding_window",
    "rope_theta",
    "max_position_embeddings",
]


class HFText:
    """Wraps a transformers model: (input_ids, attention_mask) -> its first output(s), as a tuple."""

    def __new__(cls, model, n_out=1, mask=True):
        import torch

        class W(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            if mask:

                def forward(self, input_ids, attention_mask):
                    o = self.m(input_ids=input_ids, attention_mask=attention_mask)
                    return tuple(o.values())[:n_out] if n_out > 1 else o[0]

            else:

                def forward(self, input_ids):
                    o = self.m(input_ids=input_ids)
                    return tuple(o.values())[:n_out] if n_out > 1 else o[0]

        return W()


def text_model(model, cfg, cls, vocab, n_out=1, outputs=("last_hidden_state",), lo=0, mask=True):
    inputs = [("input_ids", ids(vocab, lo))]
    dyn = {"input_ids": TEXT_DYN["input_ids"]}
    if mask:
        inputs.append(("attention_mask", padmask()))
        dyn["attention_mask"] = TEXT_DYN["attention_mask"]
    return dict(
        module=HFText(model, n_out, mask),
        inputs=inputs,
        outputs=list(outputs),
        dyn=dyn,
        export=TEXT_EXPORT,
        sizes=TEXT_SIZES,
        package="transformers",
        cls=cls,
        config=_summary(cfg, TEXT_KEYS),
    )


def m_t5_encoder():
    from transformers import T5Config, T5EncoderModel

    cfg = _hf_small(
        T5Config,
        vocab_size=1000,
        d_model=64,
        d_kv=16,
        d_ff=128,
        num_layers=2,
        num_heads=4,
        relative_attention_num_buckets=32,
        dropout_rate=0.0,
    )
    return text_model(T5EncoderModel(cfg).eval(), cfg, "T5EncoderModel", 1000)


def m_distilbert():
    from transformers import DistilBertConfig, DistilBertModel

    cfg = _hf_small(DistilBertConfig, vocab_size=1000, dim=64, hidden_dim=128, n_layers=2, n_heads=4)
    return text_model(DistilBertModel(cfg).eval(), cfg, "DistilBertModel", 1000)


def m_roberta():
    from transformers import RobertaConfig, RobertaModel

    cfg = _hf_small(
        RobertaConfig,
        vocab_size=1000,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=130,
    )
    # RoBERTa position ids count non-padding tokens from padding_idx + 1: keep ids >= 2 (not <pad>=1).
    return text_model(
        RobertaModel(cfg).eval(),
        cfg,
        "RobertaModel",
        1000,
        n_out=2,
        outputs=("last_hidden_state", "pooler_output"),
        lo=3,
    )


def m_albert():
    from transformers import AlbertConfig, AlbertModel

    cfg = _hf_small(
        AlbertConfig,
        vocab_size=1000,
        embedding_size=32,
        hidden_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=128,
    )
    return text_model(
        AlbertModel(cfg).eval(),
        cfg,
        "AlbertModel",
        1000,
        n_out=2,
        outputs=("last_hidden_state", "pooler_output"),
    )


def m_llama_decoder():
    from transformers import LlamaConfig, LlamaModel

    cfg = _hf_small(
        LlamaConfig,
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        use_cache=False,
    )
    return text_model(LlamaModel(cfg).eval(), cfg, "LlamaModel (GQA, rotary)", 1000)


def m_mistral_decoder():
    from transformers import MistralConfig, MistralModel

    cfg = _hf_small(
        MistralConfig,
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        max_position_embeddings=256,
        sliding_window=8,
        use_cache=False,
    )
    return text_model(MistralModel(cfg).eval(), cfg, "MistralModel (sliding window 8, MQA)", 1000)


def m_gpt_neox():
    from transformers import GPTNeoXConfig, GPTNeoXModel

    cfg = _hf_small(
        GPTNeoXConfig,
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        rotary_pct=0.25,
        max_position_embeddings=256,
        use_cache=False,
    )
    return text_model(GPTNeoXModel(cfg).eval(), cfg, "GPTNeoXModel (partial rotary)", 1000)


def m_bloom():
    from transformers import BloomConfig, BloomModel

    cfg = _hf_small(BloomConfig, vocab_size=1000, hidden_size=64, n_layer=2, n_head=4, use_cache=False)
    r = text_model(BloomModel(cfg).eval(), cfg, "BloomModel (ALiBi)", 1000)
    r["config"].update(n_layer=cfg.n_layer, n_head=cfg.n_head)
    return r


def m_deberta_v2():
    from transformers import DebertaV2Config, DebertaV2Model

    cfg = _hf_small(
        DebertaV2Config,
        vocab_size=1000,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=256,
        relative_attention=True,
        position_buckets=32,
        pos_att_type=["p2c", "c2p"],
    )
    r = text_model(DebertaV2Model(cfg).eval(), cfg, "DebertaV2Model (disentangled attention)", 1000)
    r["config"].update(relative_attention=True, position_buckets=32, pos_att_type="p2c,c2p")
    return r


def m_esm():
    from transformers import EsmConfig, EsmModel

    cfg = _hf_small(
        EsmConfig,
        vocab_size=33,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=1026,
        position_embedding_type="rotary",
        pad_token_id=1,
        mask_token_id=32,
        token_dropout=False,
        emb_layer_norm_before=False,
    )
    r = text_model(
        EsmModel(cfg, add_pooling_layer=False).eval(), cfg, "EsmModel (rotary)", 24, lo=4
    )
    # residues: ids 4..23 (the 20 amino acids); N = number of residues
    r["dyn"] = {k: {0: "B", 1: "N"} for k in r["dyn"]}
    r["sizes"] = [("16", {"B": 1, "N": 16}), ("24", {"B": 2, "N": 24})]
    r["export"] = {"B": 2, "N": 20}
    r["inputs"] = [
        ("input_ids", lambda rng, d: rng.integers(4, 24, size=(d["B"], d["N"]), dtype="int64")),
        ("attention_mask", padmask("N")),
    ]
    return r


def m_wav2vec2():
    import torch
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    cfg = _hf_small(
        Wav2Vec2Config,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        conv_dim=(32, 32, 32),
        conv_stride=(5, 2, 2),
        conv_kernel=(10, 3, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        feat_extract_norm="group",
        do_stable_layer_norm=False,
        mask_time_prob=0.0,
    )
    model = Wav2Vec2Model(cfg).eval()

    class W(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_values):
            return self.m(input_values).last_hidden_state

    return dict(
        module=W(),
        inputs=[("input_values", normal("B", "L"))],
        outputs=["last_hidden_state"],
        dyn={"input_values": {0: "B", 1: "L"}},
        export={"B": 2, "L": 640},
        sizes=[("400", {"B": 1, "L": 400}), ("560", {"B": 2, "L": 560})],
        package="transformers",
        cls="Wav2Vec2Model (conv feature extractor, grouped conv positions)",
        config=_summary(cfg, TEXT_KEYS)
        | {"conv_dim": list(cfg.conv_dim), "conv_stride": list(cfg.conv_stride)},
    )


def m_whisper_encoder():
    import torch
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    cfg = _hf_small(
        WhisperConfig,
        vocab_size=1000,
        num_mel_bins=16,
        d_model=64,
        encoder_layers=2,
        encoder_attention_heads=4,
        encoder_ffn_dim=128,
        max_source_positions=32,
    )
    model = WhisperEncoder(cfg).eval()

    class W(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_features):
            return self.m(input_features).last_hidden_state

    return dict(
        module=W(),
        inputs=[("input_features", normal("B", 16, 64))],
        outputs=["last_hidden_state"],
        dyn={"input_features": {0: "B"}},
        export={"B": 2},
        sizes=[("1", {"B": 1}), ("3", {"B": 3})],
        package="transformers",
        cls="WhisperEncoder (frames fixed at 2 x max_source_positions = 64)",
        config=_summary(cfg, TEXT_KEYS)
        | {"num_mel_bins": 16, "encoder_layers": 2, "max_source_positions": 32},
    )


# --- vision -------------------------------------------------------------------------------------


def _hidden_and_pooled(model, **kwargs):
    """A module over `pixel_values` returning a transformers image model's last hidden state and
    pooled output (`kwargs` passed to the model's call)."""
    import torch

    class W(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, pixel_values):
            o = self.m(pixel_values, **kwargs)
            return o.last_hidden_state, o.pooler_output

    return W()


def image_model(module, pkg, cls, config, outputs=("logits",), sizes=IMG_SIZES, export=IMG_EXPORT):
    return dict(
        module=module,
        inputs=[("pixel_values", normal("B", 3, "H", "W"))],
        outputs=list(outputs),
        dyn=IMG_DYN,
        export=export,
        sizes=sizes,
        package=pkg,
        cls=cls,
        config=config,
    )


def m_mobilenet_v3_small():
    import torchvision

    m = torchvision.models.mobilenet_v3_small(num_classes=10, width_mult=0.5).eval()
    return image_model(
        m, "torchvision", "mobilenet_v3_small", {"num_classes": 10, "width_mult": 0.5}
    )


def m_squeezenet():
    import torchvision

    m = torchvision.models.squeezenet1_1(num_classes=10).eval()
    return image_model(m, "torchvision", "squeezenet1_1", {"num_classes": 10})


def m_shufflenet_v2():
    import torchvision

    m = torchvision.models.shufflenet_v2_x0_5(num_classes=10).eval()
    return image_model(m, "torchvision", "shufflenet_v2_x0_5", {"num_classes": 10})


def m_resnet_small():
    from torchvision.models.resnet import BasicBlock, ResNet

    import torch

    # torchvision's own stem and BasicBlock stages 1-3 (one block each): 1.2M parameters; the
    # standard 4-stage resnet18 (11.7M) is too big to keep inline.
    m = ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10).eval()

    class R(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = torch.nn.Sequential(m.conv1, m.bn1, m.relu, m.maxpool)
            self.body = torch.nn.Sequential(m.layer1, m.layer2, m.layer3)
            self.pool = torch.nn.AdaptiveAvgPool2d(1)
            self.fc = torch.nn.Linear(256, 10)

        def forward(self, x):
            return self.fc(torch.flatten(self.pool(self.body(self.stem(x))), 1))

    return image_model(
        R().eval(),
        "torchvision",
        "ResNet(BasicBlock, [1,1,1,1]) stages 1-3 + avgpool + fc",
        {"blocks": [1, 1, 1], "num_classes": 10},
    )


def m_lraspp_mnv3_small():
    import torch
    import torchvision
    from torchvision.models.segmentation.lraspp import _lraspp_mobilenetv3

    backbone = torchvision.models.mobilenet_v3_small(dilated=True, width_mult=0.5)
    m = _lraspp_mobilenetv3(backbone, num_classes=4).eval()

    class W(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, pixel_values):
            return self.m(pixel_values)["out"]

    return image_model(
        W(),
        "torchvision",
        "LRASPP over mobilenet_v3_small (dilated, width 0.5)",
        {"num_classes": 4, "width_mult": 0.5},
        outputs=("out",),
    )


def m_ssdlite_head():
    import torch
    import torchvision

    m = torchvision.models.detection.ssdlite320_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=5, width_mult=0.5
    ).eval()

    class W(torch.nn.Module):
        """SSDLite backbone (+ extra layers) and head: raw box regressions and class logits."""

        def __init__(self):
            super().__init__()
            self.backbone = m.backbone
            self.head = m.head

        def forward(self, pixel_values):
            feats = list(self.backbone(pixel_values).values())
            out = self.head(feats)
            return out["bbox_regression"], out["cls_logits"]

    return image_model(
        W(),
        "torchvision",
        "SSDLite320 (mobilenet_v3_large width 0.5) backbone + SSDLiteHead",
        {"num_classes": 5, "width_mult": 0.5},
        outputs=("bbox_regression", "cls_logits"),
    )


def m_vit():
    import torch
    from transformers import ViTConfig, ViTModel

    cfg = _hf_small(
        ViTConfig,
        image_size=64,
        patch_size=16,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
    )
    model = ViTModel(cfg, add_pooling_layer=False).eval()

    class W(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, pixel_values):
            return self.m(pixel_values, interpolate_pos_encoding=True).last_hidden_state

    return image_model(
        W(),
        "transformers",
        "ViTModel (interpolate_pos_encoding)",
        _summary(cfg, TEXT_KEYS) | {"image_size": 64, "patch_size": 16},
        outputs=("last_hidden_state",),
    )


def m_swin():
    from transformers import SwinConfig, SwinModel

    cfg = _hf_small(
        SwinConfig,
        image_size=64,
        patch_size=4,
        embed_dim=16,
        depths=[2, 2],
        num_heads=[2, 4],
        window_size=4,
        drop_path_rate=0.0,
    )
    model = SwinModel(cfg).eval()

    return image_model(
        _hidden_and_pooled(model),
        "transformers",
        "SwinModel (shifted windows, padding)",
        {"embed_dim": 16, "depths": [2, 2], "num_heads": [2, 4], "window_size": 4, "patch_size": 4},
        outputs=("last_hidden_state", "pooler_output"),
    )


def m_convnext():
    from transformers import ConvNextConfig, ConvNextModel

    cfg = _hf_small(
        ConvNextConfig, hidden_sizes=[16, 32, 64], depths=[1, 1, 1], num_stages=3, drop_path_rate=0.0
    )
    model = ConvNextModel(cfg).eval()

    return image_model(
        _hidden_and_pooled(model),
        "transformers",
        "ConvNextModel",
        {"hidden_sizes": [16, 32, 64], "depths": [1, 1, 1]},
        outputs=("last_hidden_state", "pooler_output"),
    )


def m_segformer():
    import torch
    from transformers import SegformerConfig, SegformerForSemanticSegmentation

    cfg = _hf_small(
        SegformerConfig,
        num_encoder_blocks=2,
        depths=[1, 1],
        sr_ratios=[4, 2],
        hidden_sizes=[16, 32],
        patch_sizes=[7, 3],
        strides=[4, 2],
        num_attention_heads=[1, 2],
        mlp_ratios=[2, 2],
        decoder_hidden_size=32,
        num_labels=4,
        drop_path_rate=0.0,
        classifier_dropout_prob=0.0,
    )
    model = SegformerForSemanticSegmentation(cfg).eval()

    class W(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, pixel_values):
            return self.m(pixel_values).logits

    return image_model(
        W(),
        "transformers",
        "SegformerForSemanticSegmentation (efficient attention, all-MLP decoder)",
        {"hidden_sizes": [16, 32], "depths": [1, 1], "sr_ratios": [4, 2], "num_labels": 4},
    )


# --- AlphaFold/Boltz-style modules (einops, eval-time dropout) -----------------------------------


def m_einops_tri_attn():
    """AlphaFold-style triangle attention over a pair tensor written with einops rearranges."""
    import torch
    from einops import rearrange

    class TriAttn(torch.nn.Module):
        def __init__(self, c=16, heads=4):
            super().__init__()
            self.h = heads
            self.norm = torch.nn.LayerNorm(c)
            self.qkv = torch.nn.Linear(c, 3 * c, bias=False)
            self.bias = torch.nn.Linear(c, heads, bias=False)
            self.gate = torch.nn.Linear(c, c)
            self.out = torch.nn.Linear(c, c)

        def forward(self, z, pair_mask):
            z = self.norm(z)
            q, k, v = rearrange(self.qkv(z), "b i j (t h d) -> t b i h j d", t=3, h=self.h)
            bias = rearrange(self.bias(z), "b i j h -> b () h i j")
            mask = rearrange(pair_mask, "b i j -> b i () () j")
            logits = torch.einsum("bihqd,bihkd->bihqk", q, k) / q.shape[-1] ** 0.5
            logits = logits + bias + (mask - 1.0) * 1e9
            o = torch.einsum("bihqk,bihkd->bihqd", logits.softmax(-1), v)
            o = rearrange(o, "b i h j d -> b i j (h d)") * torch.sigmoid(self.gate(z))
            # outgoing/incoming: transpose the pair axes with einops, as AlphaFold's
            # TriangleAttentionEndingNode does
            return rearrange(self.out(o), "b i j c -> b j i c")

    return dict(
        module=TriAttn().eval(),
        inputs=[("z", normal("B", "N", "N", 16)), ("pair_mask", pair_mask)],
        outputs=["z_out"],
        dyn={"z": {0: "B", 1: "N", 2: "N"}, "pair_mask": {0: "B", 1: "N", 2: "N"}},
        export={"B": 2, "N": 20},
        sizes=[("16", {"B": 1, "N": 16}), ("24", {"B": 2, "N": 24})],
        package="einops",
        cls="triangle attention with einops.rearrange (written here, AlphaFold style)",
        config={"c_z": 16, "heads": 4},
    )


def m_einops_outer_product_mean():
    """AlphaFold's outer product mean (MSA -> pair) written with einops."""
    import torch
    from einops import einsum, rearrange, reduce

    class OPM(torch.nn.Module):
        def __init__(self, c_m=16, c=8, c_z=16):
            super().__init__()
            self.norm = torch.nn.LayerNorm(c_m)
            self.a = torch.nn.Linear(c_m, c)
            self.b = torch.nn.Linear(c_m, c)
            self.out = torch.nn.Linear(c * c, c_z)

        def forward(self, msa):
            m = self.norm(msa)
            a, b = self.a(m), self.b(m)
            outer = einsum(a, b, "bt s i c, bt s j d -> bt i j c d")
            outer = rearrange(outer, "bt i j c d -> bt i j (c d)") / msa.shape[1]
            z = self.out(outer)
            return z + reduce(z, "bt i j c -> bt i () c", "mean")

    return dict(
        module=OPM().eval(),
        inputs=[("msa", normal("B", "M", "N", 16))],
        outputs=["z"],
        dyn={"msa": {0: "B", 1: "M", 2: "N"}},
        export={"B": 2, "M": 6, "N": 20},
        sizes=[("16", {"B": 1, "M": 4, "N": 16}), ("24", {"B": 2, "M": 5, "N": 24})],
        package="einops",
        cls="outer product mean with einops.einsum/rearrange/reduce (written here)",
        config={"c_m": 16, "c": 8, "c_z": 16},
    )


def m_scripted_unbind_stack():
    """A TorchScript-scripted block that processes a list of tensors, as code written with
    `torch.unbind` and `torch.stack` exports through the TorchScript exporter: SplitToSequence of
    the symbolic batch axis, ConcatFromSequence back (ONNX sequence values)."""
    import torch

    class PerItem(torch.nn.Module):
        def __init__(self, c=16):
            super().__init__()
            self.norm = torch.nn.LayerNorm(c)
            self.proj = torch.nn.Linear(c, c)

        def forward(self, x):
            items = torch.unbind(self.norm(x), 0)
            out = torch.stack(items, 1)
            return self.proj(out).relu()

    return dict(
        module=torch.jit.script(PerItem().eval()),
        inputs=[("x", normal("B", "S", 16))],
        outputs=["y"],
        dyn={"x": {0: "B", 1: "S"}},
        export={"B": 3, "S": 10},
        sizes=[("16", {"B": 2, "S": 16}), ("24", {"B": 4, "S": 24})],
        package="torch",
        cls="torch.jit.script module over torch.unbind/torch.stack (written here)",
        config={"c": 16},
    )


def m_boltz_dropout_mask():
    """Boltz's pair-update pattern: get_dropout_mask (torch.rand_like(...) > p, rescaled) applied to
    a triangle multiplicative update, in eval mode (p * training = 0, so the random op stays in the
    graph and the mask is all ones)."""
    import torch

    def get_dropout_mask(dropout, z, training, columnwise=False):
        # boltz/model/layers/dropout.py (boltz 2.x), verbatim logic
        dropout = dropout * training
        v = z[:, 0:1, :, 0:1] if columnwise else z[:, :, 0:1, 0:1]
        d = torch.rand_like(v) > dropout
        d = d * 1.0 / (1.0 - dropout)
        return d

    class TriMulDrop(torch.nn.Module):
        def __init__(self, c=16):
            super().__init__()
            self.norm_in = torch.nn.LayerNorm(c)
            self.p_in = torch.nn.Linear(c, 2 * c, bias=False)
            self.g_in = torch.nn.Linear(c, 2 * c, bias=False)
            self.norm_out = torch.nn.LayerNorm(c)
            self.p_out = torch.nn.Linear(c, c, bias=False)
            self.g_out = torch.nn.Linear(c, c, bias=False)

        def forward(self, z, pair_mask):
            x = self.norm_in(z)
            x = self.p_in(x) * self.g_in(x).sigmoid() * pair_mask.unsqueeze(-1)
            a, b = torch.chunk(x.float(), 2, dim=-1)
            x = torch.einsum("bikd,bjkd->bijd", a, b)
            x = self.p_out(self.norm_out(x)) * self.g_out(z).sigmoid()
            # z = z + dropout(tri_mul_out(z)), with the eval-mode flag as Boltz passes it
            return z + get_dropout_mask(0.25, z, self.training) * x

    return dict(
        module=TriMulDrop().eval(),
        inputs=[("z", normal("B", "N", "N", 16)), ("pair_mask", pair_mask)],
        outputs=["z_out"],
        dyn={"z": {0: "B", 1: "N", 2: "N"}, "pair_mask": {0: "B", 1: "N", 2: "N"}},
        export={"B": 2, "N": 20},
        sizes=[("16", {"B": 1, "N": 16}), ("24", {"B": 2, "N": 24})],
        package="torch",
        cls="Boltz-style get_dropout_mask (rand_like > p*training) on a triangle multiplication",
        config={"c_z": 16, "dropout": 0.25, "training": False},
        random_ops=True,
        compare=True,  # the mask is all ones in eval: outputs are deterministic
    )


def m_dropout_train():
    """F.dropout(x, p, training=True) kept in an eval graph (p = 0.1): a real random op."""
    import torch
    import torch.nn.functional as F

    class Block(torch.nn.Module):
        def __init__(self, c=32):
            super().__init__()
            self.norm = torch.nn.LayerNorm(c)
            self.fc1 = torch.nn.Linear(c, 4 * c)
            self.fc2 = torch.nn.Linear(4 * c, c)

        def forward(self, x):
            h = F.dropout(F.gelu(self.fc1(self.norm(x))), 0.1, training=True)
            return x + F.dropout(self.fc2(h), p=0.0, training=True)

    return dict(
        module=Block().eval(),
        inputs=[("x", normal("B", "S", 32))],
        outputs=["y"],
        dyn={"x": {0: "B", 1: "S"}},
        export=TEXT_EXPORT,
        sizes=TEXT_SIZES,
        package="torch",
        cls="transformer MLP block with F.dropout(training=True), p=0.1 and p=0",
        config={"c": 32, "p": [0.1, 0.0]},
        random_ops=True,
        compare=False,
    )



# --- more: recurrent, optical flow, encoder-decoder, two-tower -----------------------------------


def m_lstm_tagger():
    """Embedding + 2-layer bidirectional LSTM + linear (torch.nn.LSTM: the ONNX LSTM op)."""
    import torch

    class Tagger(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(500, 32)
            self.lstm = torch.nn.LSTM(32, 32, num_layers=2, bidirectional=True, batch_first=True)
            self.out = torch.nn.Linear(64, 8)

        def forward(self, input_ids):
            h, _ = self.lstm(self.emb(input_ids))
            return self.out(h)

    return dict(
        module=Tagger().eval(),
        inputs=[("input_ids", ids(500))],
        outputs=["logits"],
        dyn={"input_ids": {0: "B", 1: "S"}},
        export=TEXT_EXPORT,
        sizes=TEXT_SIZES,
        package="torch",
        cls="torch.nn.LSTM tagger (2 layers, bidirectional, batch_first)",
        config={"vocab": 500, "hidden": 32, "layers": 2, "bidirectional": True},
    )


def m_gru_encoder():
    """torch.nn.GRU over float features (the ONNX GRU op), last hidden state projected."""
    import torch

    class Enc(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gru = torch.nn.GRU(16, 32, num_layers=1, batch_first=True)
            self.out = torch.nn.Linear(32, 4)

        def forward(self, x):
            h, last = self.gru(x)
            return h, self.out(last[-1])

    return dict(
        module=Enc().eval(),
        inputs=[("x", normal("B", "S", 16))],
        outputs=["h", "logits"],
        dyn={"x": {0: "B", 1: "S"}},
        export=TEXT_EXPORT,
        sizes=TEXT_SIZES,
        package="torch",
        cls="torch.nn.GRU encoder (batch_first)",
        config={"in": 16, "hidden": 32},
    )


def m_torch_transformer_encoder():
    """torch.nn.TransformerEncoder (norm_first, GELU) with a boolean key padding mask."""
    import torch

    layer = torch.nn.TransformerEncoderLayer(
        64, 4, 128, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
    )
    enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    class W(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = enc

        def forward(self, x, padding_mask):
            return self.enc(x, src_key_padding_mask=padding_mask)

    def pad_bool(rng, d):
        import numpy as np

        m = np.zeros((d["B"], d["S"]), dtype=bool)
        if d["B"] > 1:
            m[-1, d["S"] - d["S"] // 4 :] = True
        return m

    return dict(
        module=W().eval(),
        inputs=[("x", normal("B", "S", 64)), ("padding_mask", pad_bool)],
        outputs=["y"],
        dyn={"x": {0: "B", 1: "S"}, "padding_mask": {0: "B", 1: "S"}},
        export=TEXT_EXPORT,
        sizes=TEXT_SIZES,
        package="torch",
        cls="torch.nn.TransformerEncoder (norm_first, gelu, bool key padding mask)",
        config={"d_model": 64, "nhead": 4, "dim_feedforward": 128, "layers": 2},
    )


def m_raft_small():
    """torchvision RAFT (small): correlation pyramid (avg pools), grid_sample lookups, ConvGRU."""
    import torch
    import torchvision

    m = torchvision.models.optical_flow.raft_small(weights=None).eval()

    class W(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, image1, image2):
            return self.m(image1, image2, num_flow_updates=2)[-1]

    dyn = {"image1": {0: "B", 2: "H", 3: "W"}, "image2": {0: "B", 2: "H", 3: "W"}}
    return dict(
        module=W(),
        inputs=[("image1", normal("B", 3, "H", "W")), ("image2", normal("B", 3, "H", "W"))],
        outputs=["flow"],
        dyn=dyn,
        # the correlation pyramid needs feature maps of at least 16 (images of 128)
        export={"B": 2, "H": 128, "W": 192},
        sizes=[("128", {"B": 1, "H": 128, "W": 128}), ("160", {"B": 2, "H": 160, "W": 128})],
        package="torchvision",
        cls="raft_small (num_flow_updates=2)",
        config={"num_flow_updates": 2},
    )


def m_mnasnet():
    import torchvision

    m = torchvision.models.mnasnet0_5(num_classes=10).eval()
    return image_model(m, "torchvision", "mnasnet0_5", {"num_classes": 10})


def _seq2seq(model, cfg, low_id, cls, extra):
    """An encoder-decoder transformers model (no cache) as a spec: inputs input_ids [B, S] (ids from
    `low_id`, below the special tokens' ids when 3), attention_mask [B, S] and decoder_input_ids
    [B, T]; output the decoder's last hidden state."""
    import torch

    class W(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_ids, attention_mask, decoder_input_ids):
            return self.m(
                input_ids=input_ids,
                attention_mask=attention_mask,
                decoder_input_ids=decoder_input_ids,
                use_cache=False,
            ).last_hidden_state

    return dict(
        module=W(),
        inputs=[
            ("input_ids", ids(1000, low_id)),
            ("attention_mask", padmask()),
            (
                "decoder_input_ids",
                lambda rng, d: rng.integers(low_id, 1000, (d["B"], d["T"]), dtype="int64"),
            ),
        ],
        outputs=["last_hidden_state"],
        dyn={
            "input_ids": {0: "B", 1: "S"},
            "attention_mask": {0: "B", 1: "S"},
            "decoder_input_ids": {0: "B", 1: "T"},
        },
        export={"B": 2, "S": 20, "T": 7},
        sizes=[("16", {"B": 1, "S": 16, "T": 5}), ("24", {"B": 2, "S": 24, "T": 9})],
        package="transformers",
        cls=cls,
        config=_summary(cfg, TEXT_KEYS) | extra,
    )


def m_t5_seq2seq():
    """T5Model encoder + decoder (causal self-attention, cross-attention), no cache."""
    import torch
    from transformers import T5Config, T5Model

    cfg = _hf_small(
        T5Config,
        vocab_size=1000,
        d_model=64,
        d_kv=16,
        d_ff=128,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        relative_attention_num_buckets=32,
        dropout_rate=0.0,
        use_cache=False,
        feed_forward_proj="gated-gelu",
    )
    return _seq2seq(
        T5Model(cfg).eval(),
        cfg,
        low_id=0,
        cls="T5Model (gated-gelu, encoder-decoder, no cache)",
        extra={"feed_forward_proj": "gated-gelu"},
    )


def m_bart():
    """BartModel encoder + decoder (learned positions with offset, causal mask), no cache."""
    import torch
    from transformers import BartConfig, BartModel

    cfg = _hf_small(
        BartConfig,
        vocab_size=1000,
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        max_position_embeddings=128,
        use_cache=False,
    )
    return _seq2seq(
        BartModel(cfg).eval(),
        cfg,
        low_id=3,
        cls="BartModel (encoder-decoder, no cache)",
        extra={"encoder_layers": 2, "decoder_layers": 2},
    )


def m_gptj():
    from transformers import GPTJConfig, GPTJModel

    cfg = _hf_small(
        GPTJConfig, vocab_size=1000, n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=256,
        use_cache=False,
    )
    r = text_model(GPTJModel(cfg).eval(), cfg, "GPTJModel (interleaved partial rotary, parallel block)", 1000)
    r["config"].update(n_embd=64, n_layer=2, n_head=4, rotary_dim=8)
    return r


def m_falcon():
    from transformers import FalconConfig, FalconModel

    cfg = _hf_small(
        FalconConfig, vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        multi_query=True, new_decoder_architecture=False, parallel_attn=True, alibi=False,
        use_cache=False,
    )
    r = text_model(FalconModel(cfg).eval(), cfg, "FalconModel (multi-query, rotary, parallel attention)", 1000)
    r["config"].update(multi_query=True, parallel_attn=True)
    return r


def m_funnel():
    from transformers import FunnelConfig, FunnelBaseModel

    cfg = _hf_small(
        FunnelConfig, vocab_size=1000, block_sizes=[1, 1], block_repeats=None, d_model=64, n_head=4,
        d_head=16, d_inner=128, num_decoder_layers=1,
    )
    r = text_model(FunnelBaseModel(cfg).eval(), cfg, "FunnelBaseModel (sequence pooling, relative attention)", 1000)
    r["config"].update(block_sizes=[1, 1], d_model=64, n_head=4)
    return r


def m_convbert():
    from transformers import ConvBertConfig, ConvBertModel

    cfg = _hf_small(
        ConvBertConfig, vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, embedding_size=64, head_ratio=2, conv_kernel_size=5,
    )
    r = text_model(ConvBertModel(cfg).eval(), cfg, "ConvBertModel (span-based dynamic convolution)", 1000)
    r["config"].update(head_ratio=2, conv_kernel_size=5)
    return r


def m_dinov2():
    from transformers import Dinov2Config, Dinov2Model

    cfg = _hf_small(
        Dinov2Config, image_size=64, patch_size=8, hidden_size=64, num_hidden_layers=2,
        num_attention_heads=4, mlp_ratio=2, layerscale_value=1.0,
    )
    model = Dinov2Model(cfg).eval()

    return image_model(
        _hidden_and_pooled(model),
        "transformers",
        "Dinov2Model (bicubic position-encoding interpolation, layer scale)",
        _summary(cfg, TEXT_KEYS) | {"image_size": 64, "patch_size": 8},
        outputs=("last_hidden_state", "pooler_output"),
    )


def m_beit():
    from transformers import BeitConfig, BeitModel

    cfg = _hf_small(
        BeitConfig, image_size=64, patch_size=16, hidden_size=64, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=128, use_relative_position_bias=True,
        use_mean_pooling=True,
    )
    model = BeitModel(cfg).eval()

    return image_model(
        _hidden_and_pooled(model, interpolate_pos_encoding=True),
        "transformers",
        "BeitModel (relative position bias, interpolated)",
        _summary(cfg, TEXT_KEYS) | {"image_size": 64, "patch_size": 16},
        outputs=("last_hidden_state", "pooler_output"),
    )


def m_mobilevit():
    from transformers import MobileViTConfig, MobileViTModel

    cfg = _hf_small(
        MobileViTConfig, image_size=64, hidden_sizes=[32, 40, 48], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
        num_attention_heads=2, patch_size=2,
    )
    model = MobileViTModel(cfg).eval()

    return image_model(
        _hidden_and_pooled(model),
        "transformers",
        "MobileViTModel (unfold to patches, transformer, fold back)",
        {"hidden_sizes": [32, 40, 48], "neck_hidden_sizes": [8, 8, 16, 16, 24, 32, 64], "patch_size": 2},
        outputs=("last_hidden_state", "pooler_output"),
    )


MODELS = {
    name[2:]: fn
    for name, fn in sorted(globals().items())
    if name.startswith("m_") and callable(fn)
}


# ---------------------------------------------------------------------------------------------


def first_line(e: BaseException) -> str:
    """The first line of the error, and of its innermost cause when it has one (the exporters wrap
    the real error in generic ones)."""

    def line(x):
        s = f"{type(x).__name__}: {x}".strip()
        return next((l.strip() for l in s.splitlines() if l.strip()), type(x).__name__)[:240]

    inner = e
    while inner.__cause__ is not None or inner.__context__ is not None:
        inner = inner.__cause__ or inner.__context__
    return line(e) if inner is e else f"{line(e)} [cause: {line(inner)}]"


def graph_summary(path: Path):
    import onnx

    m = onnx.load(str(path), load_external_data=False)
    hist = collections.Counter(n.op_type for n in m.graph.node)
    dims = lambda vi: [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]  # noqa: E731
    return {
        "file": path.name,
        "bytes": path.stat().st_size,
        "opsets": {o.domain or "ai.onnx": o.version for o in m.opset_import},
        "nodes": len(m.graph.node),
        "functions": len(m.functions),
        "ops": dict(sorted(hist.items())),
        "inputs": {i.name: dims(i) for i in m.graph.input},
        "outputs": {o.name: dims(o) for o in m.graph.output},
    }


def export_one(stem: str) -> dict:
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch

    torch.manual_seed(SEED)
    spec = MODELS[stem]()
    module = spec["module"]
    names = [n for n, _ in spec["inputs"]]
    example_np = {n: g(_rng(stem, "export"), spec["export"]) for n, g in spec["inputs"]}
    example = tuple(torch.from_numpy(example_np[n]) for n in names)
    (WIDE / "models").mkdir(parents=True, exist_ok=True)
    (WIDE / "inputs").mkdir(parents=True, exist_ok=True)
    (WIDE / "ort").mkdir(parents=True, exist_ok=True)

    n_params = sum(p.numel() for p in module.parameters())
    entry = {
        "stem": stem,
        "package": spec["package"],
        "version": md.version(spec["package"]),
        "torch": torch.__version__,
        "class": spec["cls"],
        "config": spec["config"],
        "parameters": n_params,
        "random_ops": spec.get("random_ops", False),
        "compare_outputs": spec.get("compare", True),
        "symbols": sorted({s for ax in spec["dyn"].values() for s in ax.values()}),
        "dynamic_axes": {k: {str(a): s for a, s in v.items()} for k, v in spec["dyn"].items()},
        "export_dims": spec["export"],
        "sizes": {tag: d for tag, d in spec["sizes"]},
        "exports": {},
    }
    # inputs
    feeds = {}
    for tag, d in spec["sizes"]:
        arrs = {n: g(_rng(stem, tag), d) for n, g in spec["inputs"]}
        np.savez(WIDE / "inputs" / f"{stem}_{tag}.npz", **arrs)
        feeds[tag] = arrs
    # torch reference (eager) at the first size, to check the exports
    with torch.no_grad():
        eager = {}
        for tag, _ in spec["sizes"]:
            o = module(*(torch.from_numpy(feeds[tag][n]) for n in names))
            o = o if isinstance(o, tuple) else (o,)
            eager[tag] = [t.detach().numpy() for t in o]

    for variant, dynamo in (("dynamo", True), ("legacy", False)):
        fname = f"{stem}.onnx" if dynamo else f"{stem}.legacy.onnx"
        path = WIDE / "models" / fname
        rec = {"file": fname}
        t0 = time.time()
        try:
            kw = dict(
                input_names=names,
                output_names=spec["outputs"],
                opset_version=OPSET,
                dynamic_axes=spec["dyn"],
                dynamo=dynamo,
            )
            if dynamo:
                kw["external_data"] = False
            else:
                kw["do_constant_folding"] = True
            with torch.no_grad():
                torch.onnx.export(module, example, str(path), **kw)
            rec["export_s"] = round(time.time() - t0, 1)
            ext = [p for p in (WIDE / "models").iterdir() if p.name.startswith(fname) and p != path]
            for p in ext:
                p.unlink()
            if ext:
                raise RuntimeError(f"external data written: {[p.name for p in ext]}")
            onnx.checker.check_model(str(path))
            size = path.stat().st_size
            if size > MAX_BYTES:
                raise RuntimeError(f"{fname} is {size} bytes (> 10 MB)")
            rec.update(graph_summary(path))
            so = ort.SessionOptions()
            so.intra_op_num_threads = 1
            sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            declared = [i.name for i in sess.get_inputs()]
            out_names = [o.name for o in sess.get_outputs()]
            rec["ort"] = {}
            for tag, _ in spec["sizes"]:
                outs = sess.run(None, {n: feeds[tag][n] for n in declared})
                np.savez(WIDE / "ort" / f"{path.stem}_{tag}.npz", **dict(zip(out_names, outs)))
                errs = [
                    float(np.max(np.abs(a.astype("float64") - b.astype("float64"))))
                    if a.shape == b.shape
                    else f"shape {list(a.shape)} vs torch {list(b.shape)}"
                    for a, b in zip(outs, eager[tag])
                ]
                rec["ort"][tag] = {
                    "output_shapes": {n: list(o.shape) for n, o in zip(out_names, outs)},
                    "max_abs_diff_vs_torch": errs,
                }
            rec["ok"] = True
        except Exception as e:  # noqa: BLE001
            rec["ok"] = False
            rec["error"] = first_line(e)
            rec["export_s"] = round(time.time() - t0, 1)
            traceback.print_exc()
            if path.exists():
                path.unlink()
        entry["exports"][variant] = rec
    return entry


def assemble():
    frags = sorted(FRAG.glob("*.json"))
    # Models exported in an earlier checkout (no cached fragment here) keep their manifest entry.
    models = {}
    if (WIDE / "manifest.json").exists():
        old = json.loads((WIDE / "manifest.json").read_text())["models"]
        models = {k: v for k, v in old.items() if k in MODELS}
    for f in frags:
        e = json.loads(f.read_text())
        if e["stem"] in MODELS:
            models[e["stem"]] = e
    models = dict(sorted(models.items()))
    import onnx
    import onnxruntime as ort

    manifest = {
        "conventions": {
            "files": "models/<stem>.onnx = torch.onnx.export(dynamo=True); models/<stem>.legacy.onnx = "
            "TorchScript exporter; both opset 18, weights inline",
            "inputs": "inputs/<stem>_<tag>.npz: keys = the model's input names; sizes[tag] = the symbol "
            "values it binds",
            "ort": "ort/<file stem>_<tag>.npz: onnxruntime (CPU, 1 thread) outputs for those inputs, keyed "
            "by the file's output names",
            "random_ops": "the graph holds random ops; compare_outputs false = outputs are random, "
            "compare only shapes",
            "max_abs_diff_vs_torch": "onnxruntime vs PyTorch eager, per output",
        },
        "generator": "tools/export_wide.py",
        "versions": {
            p: md.version(p)
            for p in ("torch", "torchvision", "transformers", "einops", "onnxscript", "onnx", "onnxruntime")
        },
        "models": models,
    }
    del onnx, ort
    (WIDE / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=False) + "\n")
    ok = sum(r["ok"] for e in models.values() for r in e["exports"].values())
    print(f"manifest: {len(models)} models, {ok} exports ok")
    for e in models.values():
        for v, r in e["exports"].items():
            if not r["ok"]:
                print(f"  {e['stem']} {v}: {r['error']}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--manifest", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    if a.list:
        print("\n".join(MODELS))
        return
    if a.child:
        os.environ.setdefault("OMP_NUM_THREADS", "2")
        e = export_one(a.child)
        FRAG.mkdir(parents=True, exist_ok=True)
        (FRAG / f"{a.child}.json").write_text(json.dumps(e, indent=1))
        return
    if not a.manifest:
        todo = a.only or list(MODELS)
        for stem in todo:
            if stem not in MODELS:
                sys.exit(f"unknown model {stem}; --list lists them")
            if (FRAG / f"{stem}.json").exists() and not a.force:
                continue
            t0 = time.time()
            log = WIDE / ".frag" / f"{stem}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "w") as fh:
                r = subprocess.run(
                    [sys.executable, __file__, "--child", stem], stdout=fh, stderr=subprocess.STDOUT
                )
            status = "ok" if r.returncode == 0 else f"exit {r.returncode} (see {log})"
            print(f"{stem}: {status} in {time.time() - t0:.0f}s", flush=True)
    assemble()


if __name__ == "__main__":
    main()
