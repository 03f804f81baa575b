"""Export small random-weight models from packages the corpus does not use (transformers'
Wav2Vec2, BART, Qwen2, Phi, Gemma, SegFormer, CLIP; torch's LSTM/GRU; torchvision's FCN, DeepLabV3,
an R3D-style video net) with both torch ONNX exporters, for checking memplan on files it has not
seen (BENCHMARKS.md, "Fresh exports").
A second batch (written to OUT=target/fresh2): transformers' XLNet, RoFormer, MPNet, OPT,
Nystromformer, Perceiver (text preprocessor), PatchTST, HuBERT, SqueezeBERT, CvT, PoolFormer,
ViT-MAE (random masking left in the graph), Reformer (LSH, random rotations); torchvision's
Swin-V2-T, MaxViT-T, GoogLeNet.
A third batch (OUT=target/fresh3): transformers' GPT-Neo (local + global layers), CodeGen, GPTBigCode
(multi-query), BioGPT, XGLM, ELECTRA, FNet (Fourier mixing), Mamba (selective scan).
Later rounds: OpenAI GPT, ImageGPT (OUT=target/fresh4), Funnel (target/fresh5), ESMFold's trunk block,
Longformer, BigBird (OUT=target/fresh6; BIGBIRD_S sets BigBird's traced length, default 1024),
LongT5's encoder (transient-global attention; OUT=target/fresh11; LONGT5_S exports it static at
that length, as its dynamo export needs), PEGASUS-X's encoder (block-local attention with global
tokens; OUT=target/fresh11).
A twelfth batch (OUT=target/fresh12): BLOOM and MPT (ALiBi), Falcon (RW, rotary, multi-query), Mistral
(sliding window 64), GPT-J (interleaved rotary), ModernBERT and T5Gemma's encoder (local/global
layers), Whisper's encoder (static 3000 frames), BEiT (relative position bias, static 224), DINOv2
(interpolated positions, 14*h x 14*w), ConvNeXt, MobileViT.
A thirteenth batch (OUT=target/fresh13): ConvBERT, CANINE, YOSO, Swin, LeViT, PVT, RegNet, UMT5's and
Switch Transformers' encoders (MoE), Wav2Vec2-Conformer; torchvision's EfficientNet-B0, MobileNetV3-Small, ViT-B/16 (torchvision from PYTHONPATH where not installed). MRA is left out: without
its CUDA kernels (fetched from a hub) its attention returns zeros.
usage: python bench/fresh_exports.py NAME [legacy|dynamo|both]   (OUT=dir, default target/fresh)
Writes $OUT/NAME_{legacy,dynamo}.onnx, each with NAME_{legacy,dynamo}.versions.json beside it: the
versions of the packages that wrote it (exports differ between torch and transformers releases:
torch 2.15 folds T5's bucket cap into a constant that earlier releases computed).
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


# ---- second batch (OUT=target/fresh2): models/classes not used above ----

class Called(nn.Module):
    """`keys` of the model output for the one input passed as keyword `names[0]` (plus `kw`)."""
    def __init__(self, m, names, keys, **kw):
        super().__init__()
        self.m = m
        self.name = names[0]
        self.keys = keys
        self.kw = kw

    def forward(self, x):
        o = self.m(**{self.name: x}, **self.kw)
        return tuple(getattr(o, k) for k in self.keys)


def image_encoder(m, x, stride, max_blocks):
    """`last_hidden_state` of `m` for `pixel_values` `x` [1, 3, H, W]; the dynamo export takes H and W
    as multiples of `stride` (its patch or total downsampling), 2 to `max_blocks` of them."""
    h, w = Dim("h", min=2, max=max_blocks), Dim("w", min=2, max=max_blocks)
    return (Wrap(m, ["last_hidden_state"]), (x,), ["pixel_values"], ["last_hidden_state"],
            {"pixel_values": {2: "H", 3: "W"}}, {"pixel_values": {2: stride * h, 3: stride * w}})


def text_encoder(m, vocab=1000, seq=32, max_s=2000, **kw):
    """`last_hidden_state` of `m` for `input_ids` [1, S], ids in [0, vocab)."""
    ids = torch.randint(0, vocab, (1, seq))
    return (Called(m, ["input_ids"], ["last_hidden_state"], **kw), (ids,), ["input_ids"], ["last_hidden_state"],
            {"input_ids": {1: "S"}}, {"input_ids": {1: Dim("S", min=2, max=max_s)}})


def xlnet():
    """XLNet: two-stream relative attention (content stream only in eval), sinusoidal relative
    positions built from arange(S) at run time, no mems."""
    from transformers import XLNetConfig, XLNetModel
    cfg = XLNetConfig(vocab_size=1000, d_model=128, n_layer=2, n_head=4, d_inner=256,
                      use_mems_eval=False, mem_len=None)
    return text_encoder(XLNetModel(cfg).eval(), use_mems=False)


def roformer():
    """RoFormer: rotary position embedding applied to q/k (sinusoidal table sliced to S)."""
    from transformers import RoFormerConfig, RoFormerModel
    cfg = RoFormerConfig(vocab_size=1000, embedding_size=128, hidden_size=128, num_hidden_layers=2,
                         num_attention_heads=4, intermediate_size=256, max_position_embeddings=2048)
    return text_encoder(RoFormerModel(cfg).eval())


def mpnet():
    """MPNet: T5-style bucketed relative position bias (32 buckets) shared by all layers."""
    from transformers import MPNetConfig, MPNetModel
    cfg = MPNetConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=256, max_position_embeddings=2050, relative_attention_num_buckets=32)
    return text_encoder(MPNetModel(cfg).eval(), max_s=2000)


def opt():
    """OPT decoder (learned positions offset by 2 from a cumsum of the attention mask,
    embedding projection 64 -> 128 -> 64)."""
    from transformers import OPTConfig, OPTModel
    cfg = OPTConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, ffn_dim=256, num_attention_heads=4,
                    word_embed_proj_dim=64, max_position_embeddings=2048)
    m = OPTModel(cfg).eval()
    ids = torch.randint(0, 1000, (1, 32))
    return (LastHidden(m), (ids,), ["input_ids"], ["last_hidden_state"],
            {"input_ids": {1: "S"}}, {"input_ids": {1: Dim("S", min=2, max=2000)}})


def nystromformer():
    """Nystromformer: landmark attention (16 landmarks over a fixed 128-token segment, Moore-Penrose
    iterative inverse, depthwise conv skip). The landmark reshape hard-codes the sequence length,
    so the sequence is fixed at 128 and the batch is symbolic."""
    from transformers import NystromformerConfig, NystromformerModel
    cfg = NystromformerConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                              intermediate_size=256, segment_means_seq_len=128, num_landmarks=16,
                              conv_kernel_size=33, inv_coeff_init_option=False, max_position_embeddings=512)
    m = NystromformerModel(cfg).eval()

    class W(nn.Module):
        # NystromformerModel builds a 4-D [B,1,S,S] mask that its landmark path cannot add to the
        # [B,H,16,S] scores (transformers 5.x), so run the embeddings and encoder without a mask.
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            return self.m.encoder(self.m.embeddings(input_ids=input_ids), attention_mask=None).last_hidden_state
    ids = torch.randint(0, 1000, (2, 128))
    return (W(), (ids,), ["input_ids"], ["last_hidden_state"],
            {"input_ids": {0: "B"}}, {"input_ids": {0: Dim("B", min=1, max=256)}})


def perceiver():
    """Perceiver IO over text: byte embeddings + learned positions (PerceiverTextPreprocessor),
    cross-attention from 32 latents to S tokens, 2 latent self-attention layers."""
    from transformers import PerceiverConfig, PerceiverModel
    from transformers.models.perceiver.modeling_perceiver import PerceiverTextPreprocessor
    cfg = PerceiverConfig(num_latents=32, d_latents=128, d_model=64, num_blocks=1, num_self_attends_per_block=2,
                          num_self_attention_heads=4, num_cross_attention_heads=2, qk_channels=None,
                          v_channels=None, vocab_size=262, max_position_embeddings=2048)
    m = PerceiverModel(cfg, input_preprocessor=PerceiverTextPreprocessor(cfg)).eval()
    ids = torch.randint(0, 262, (1, 64))
    return (Called(m, ["inputs"], ["last_hidden_state"]), (ids,), ["input_ids"], ["last_hidden_state"],
            {"input_ids": {1: "S"}}, {"input_ids": {1: Dim("S", min=2, max=2048)}})


def patchtst():
    """PatchTST: mean scaling, patching (unfold) of a fixed 96-step context into 12 patches, channel-
    independent transformer. The positional encoding fixes the context length and torch.export fixes
    the channel count, so the batch is the symbolic dim."""
    from transformers import PatchTSTConfig, PatchTSTModel
    cfg = PatchTSTConfig(num_input_channels=7, context_length=96, patch_length=8, patch_stride=8, d_model=64,
                         num_attention_heads=4, num_hidden_layers=2, ffn_dim=128, do_mask_input=False)
    m = PatchTSTModel(cfg).eval()
    x = torch.randn(2, 96, 7)
    # torch.export specializes the channel count to the config's 7, so the batch is the symbolic dim
    return (Called(m, ["past_values"], ["last_hidden_state"]), (x,), ["past_values"], ["last_hidden_state"],
            {"past_values": {0: "B"}}, {"past_values": {0: Dim("B", min=1, max=4096)}})


def hubert():
    """HuBERT (conv feature encoder, layer-norm feature extractor, stable layer norm)."""
    from transformers import HubertConfig, HubertModel
    cfg = HubertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256,
                       conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                       num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, do_stable_layer_norm=True,
                       feat_extract_norm="layer", apply_spec_augment=False)
    m = HubertModel(cfg).eval()
    x = torch.randn(1, 16000)
    return (Wrap(m, ["last_hidden_state"]), (x,), ["audio"], ["last_hidden_state"],
            {"audio": {1: "L"}}, {"audio": {1: Dim("L", min=400, max=200000)}})


def squeezebert():
    """SqueezeBERT: grouped 1x1 Conv1d projections in [B, C, S] layout."""
    from transformers import SqueezeBertConfig, SqueezeBertModel
    cfg = SqueezeBertConfig(vocab_size=1000, embedding_size=128, hidden_size=128, num_hidden_layers=2,
                            num_attention_heads=4, intermediate_size=256, max_position_embeddings=2048,
                            q_groups=4, k_groups=4, v_groups=4, post_attention_groups=1,
                            intermediate_groups=4, output_groups=4)
    return text_encoder(SqueezeBertModel(cfg).eval())


def cvt():
    """CvT: overlapping conv token embedding, depthwise-conv q/k/v projections (stride-2 k/v), 3 stages."""
    from transformers import CvtConfig, CvtModel
    # depth[i] > i: CvtStage indexes its per-layer drop-path list by the stage index
    cfg = CvtConfig(embed_dim=[32, 64, 128], num_heads=[1, 2, 4], depth=[1, 2, 3],
                    cls_token=[False, False, True])
    m = CvtModel(cfg).eval()
    x = torch.randn(1, 3, 224, 224)
    return (Wrap(m, ["last_hidden_state"]), (x,), ["pixel_values"], ["last_hidden_state"],
            {"pixel_values": {2: "H", 3: "W"}},
            {"pixel_values": {2: Dim("H", min=64, max=1024), 3: Dim("W", min=64, max=1024)}})


def poolformer():
    """PoolFormer: avg-pool token mixer, group norm, conv MLPs (all convolutional)."""
    from transformers import PoolFormerConfig, PoolFormerModel
    cfg = PoolFormerConfig(depths=[1, 1, 2, 1], hidden_sizes=[32, 64, 128, 128])
    m = PoolFormerModel(cfg).eval()
    x = torch.randn(1, 3, 224, 224)
    return (Wrap(m, ["last_hidden_state"]), (x,), ["pixel_values"], ["last_hidden_state"],
            {"pixel_values": {2: "H", 3: "W"}},
            {"pixel_values": {2: Dim("H", min=64, max=2048), 3: Dim("W", min=64, max=2048)}})


def vitmae():
    """ViT-MAE encoder: random masking (torch.rand noise drawn in forward, argsort, gather of 25% of
    the patches) kept in the eval graph; position embeddings interpolated to H/W."""
    from transformers import ViTMAEConfig, ViTMAEModel
    cfg = ViTMAEConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                       image_size=224, patch_size=16, mask_ratio=0.75)
    m = ViTMAEModel(cfg).eval()
    x = torch.randn(1, 3, 224, 224)
    return (Called(m, ["pixel_values"], ["last_hidden_state", "mask", "ids_restore"], interpolate_pos_encoding=True),
            (x,), ["pixel_values"], ["last_hidden_state", "mask", "ids_restore"],
            {"pixel_values": {2: "H", 3: "W"}},
            {"pixel_values": {2: Dim("H", min=32, max=2048), 3: Dim("W", min=32, max=2048)}})


def reformer():
    """Reformer: local + LSH self-attention (random rotations drawn in forward, hash_seed unset),
    axial position embeddings (16x16 = 256 positions max), chunked feed-forward, reversible residuals."""
    from transformers import ReformerConfig, ReformerModel
    cfg = ReformerConfig(vocab_size=320, hidden_size=128, num_attention_heads=2, attention_head_size=64,
                         attn_layers=["local", "lsh"], feed_forward_size=256, axial_pos_shape=[16, 16],
                         axial_pos_embds_dim=[64, 64], max_position_embeddings=256, local_attn_chunk_length=32,
                         lsh_attn_chunk_length=32, num_buckets=4, num_hashes=1, is_decoder=False,
                         chunk_size_lm_head=0, chunk_size_feed_forward=0)
    m = ReformerModel(cfg).eval()
    ids = torch.randint(0, 320, (2, 64))
    # the chunking pads S in Python, so torch.export specializes S (64): the batch is symbolic instead
    return (Called(m, ["input_ids"], ["last_hidden_state"]), (ids,), ["input_ids"], ["last_hidden_state"],
            {"input_ids": {0: "B"}}, {"input_ids": {0: Dim("B", min=1, max=256)}})


def tv_model(ctor, size=224, dyn=True, **kw):
    import torchvision
    m = getattr(torchvision.models, ctor)(weights=None, **kw).eval()
    x = torch.randn(1, 3, size, size)
    if not dyn:
        return (m, (x,), ["x"], ["logits"], None, None)
    return (m, (x,), ["x"], ["logits"], {"x": {2: "H", 3: "W"}},
            {"x": {2: Dim("H", min=64, max=2048), 3: Dim("W", min=64, max=2048)}})


def swin_v2_t():
    """torchvision Swin-V2-T: shifted 8x8 windows with padding to window multiples, log-spaced
    continuous relative position bias MLP, cosine attention. torch.export guards the window/shift
    choice on the stage sizes (H/4 .. H/32 against the 8x8 window), so the dynamo export takes
    H = 256*h, W = 256*w with h, w >= 2 (512x512 example, the last stage larger than a window)."""
    m, args, inames, onames, dyn_axes, _ = tv_model("swin_v2_t", size=512)
    h, w = Dim("h", min=2, max=8), Dim("w", min=2, max=8)
    return m, args, inames, onames, dyn_axes, {"x": {2: 256 * h, 3: 256 * w}}


def maxvit_t():
    """torchvision MaxViT-T: MBConv + block (window) and grid attention, 7x7 partitions (fixed 224x224)."""
    return tv_model("maxvit_t", dyn=False)


def googlenet():
    """torchvision GoogLeNet (inception v1) without auxiliary heads; ceil-mode max pools. Named
    H/W Dims fail in torch.export ("Expected op to be '==', got <" on the ceil-mode pool sizes),
    Dim.AUTO exports with H/W symbolic (named s.. by the exporter)."""
    # init_weights=False: torchvision's init (std-0.01 truncated normal) makes the features vanish,
    # the logits then equal the fc bias and a comparison with torch says nothing
    m, args, inames, onames, dyn_axes, _ = tv_model("googlenet", aux_logits=False, init_weights=False,
                                                    transform_input=False)
    return m, args, inames, onames, dyn_axes, {"x": {2: Dim.AUTO, 3: Dim.AUTO}}


# ---- third batch (OUT=target/fresh3): more transformers text models, input_ids [1, S] ----

class OnesMasked(nn.Module):
    """`last_hidden_state` of a decoder for `input_ids` with an all-ones `attention_mask`, no cache.
    (With no mask, transformers' masking utils look for packed sequences with torch.diff over the
    position ids, which the TorchScript exporter cannot export: "aten::diff ... not supported".)"""
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), use_cache=False).last_hidden_state


def masked_decoder(m, seq=32, max_s=4096):
    """`OnesMasked(m)` over `input_ids` [1, S], ids in [0, 1000)."""
    ids = torch.randint(0, 1000, (1, seq))
    return (OnesMasked(m), (ids,), ["input_ids"], ["last_hidden_state"],
            {"input_ids": {1: "S"}}, {"input_ids": {1: Dim("S", min=2, max=max_s)}})


def gpt_neo():
    """GPT-Neo: alternating global and local (sliding window of 128) causal attention layers,
    learned absolute positions, no attention scaling."""
    from transformers import GPTNeoConfig, GPTNeoModel
    cfg = GPTNeoConfig(vocab_size=1000, hidden_size=128, num_layers=2, num_heads=4, intermediate_size=256,
                       max_position_embeddings=4096, attention_types=[[["global", "local"], 1]], window_size=128,
                       attn_implementation="eager")
    return masked_decoder(GPTNeoModel(cfg).eval())


def codegen():
    """CodeGen: fused qkv split in 4 groups (mp_num), partial rotary (rotary_dim 16 of head 32) from a
    sin/cos table sliced by position ids, parallel attention + MLP."""
    from transformers import CodeGenConfig, CodeGenModel
    cfg = CodeGenConfig(vocab_size=1000, n_embd=128, n_layer=2, n_head=4, n_inner=256, rotary_dim=16,
                        n_positions=4096, n_ctx=4096, attn_implementation="eager")
    return masked_decoder(CodeGenModel(cfg).eval())


def gpt_bigcode():
    """GPTBigCode (SantaCoder/StarCoder): multi-query attention (one shared k/v head, fused c_attn
    with q 128 + kv 2x32), learned positions."""
    from transformers import GPTBigCodeConfig, GPTBigCodeModel
    cfg = GPTBigCodeConfig(vocab_size=1000, n_embd=128, n_layer=2, n_head=4, n_inner=256, n_positions=4096,
                           multi_query=True, attn_implementation="eager")
    return masked_decoder(GPTBigCodeModel(cfg).eval())


def biogpt():
    """BioGPT: causal decoder with learned positions offset by 2 from a cumsum of the attention
    mask, scaled embeddings."""
    from transformers import BioGptConfig, BioGptModel
    cfg = BioGptConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=256, max_position_embeddings=4096, attn_implementation="eager")
    return text_encoder(BioGptModel(cfg).eval(), max_s=4096, use_cache=False)


def xglm():
    """XGLM: causal decoder with sinusoidal positions (offset 2) taken from a precomputed table that
    forward regrows when S exceeds it, scaled embeddings."""
    from transformers import XGLMConfig, XGLMModel
    cfg = XGLMConfig(vocab_size=1000, d_model=128, num_layers=2, attention_heads=4, ffn_dim=256,
                     max_position_embeddings=4096, attn_implementation="eager")
    return text_encoder(XGLMModel(cfg).eval(), max_s=4096, use_cache=False)


def electra():
    """ELECTRA discriminator encoder: embedding 64 projected to hidden 128, bidirectional attention
    with an all-ones padding mask, absolute learned positions."""
    from transformers import ElectraConfig, ElectraModel
    cfg = ElectraConfig(vocab_size=1000, embedding_size=64, hidden_size=128, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=256, max_position_embeddings=4096,
                        attn_implementation="eager")
    return text_encoder(ElectraModel(cfg).eval(), max_s=4096)


def fnet():
    """FNet: no attention, token mixing by a 2-D FFT over (S, hidden) keeping the real part (dynamo
    only: the TorchScript exporter has no aten::fft_fftn)."""
    from transformers import FNetConfig, FNetModel
    cfg = FNetConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, intermediate_size=256,
                     max_position_embeddings=4096, use_tpu_fourier_optimizations=False)
    return text_encoder(FNetModel(cfg).eval(), max_s=4096)


def mamba():
    """Mamba: no attention or positions; causal depthwise conv1d then a selective scan (the slow
    path: a Python loop over S with input-dependent A/B/C/dt), unrolled at export: the dynamo file
    is static at S=32; the legacy file keeps a symbolic S but onnxruntime rejects it (Tile with a
    non-1-D repeats input), so it is not kept."""
    from transformers import MambaConfig, MambaModel
    cfg = MambaConfig(vocab_size=1000, hidden_size=64, state_size=16, num_hidden_layers=2, expand=2,
                      conv_kernel=4, use_cache=False)
    return text_encoder(MambaModel(cfg).eval(), max_s=4096, use_cache=False)


# ---- fourth batch (OUT=target/fresh4): causal masks kept as weights (buffers of tril) ----

def openai_gpt():
    """OpenAI GPT: its causal mask a float buffer `tril(ones(n, n))` [1, 1, 4096, 4096] (64 MiB),
    sliced to [S, S] and applied as `w * b - 1e4 * (1 - b)`."""
    from transformers import OpenAIGPTConfig, OpenAIGPTModel
    cfg = OpenAIGPTConfig(vocab_size=1000, n_embd=128, n_layer=2, n_head=4, n_positions=4096,
                          attn_implementation="eager")
    return text_encoder(OpenAIGPTModel(cfg).eval(), max_s=4096)


def imagegpt():
    """ImageGPT: GPT-2-like decoder over pixel-cluster ids, its causal mask a bool buffer
    `tril(ones(n, n))` [1, 1, 4096, 4096]."""
    from transformers import ImageGPTConfig, ImageGPTModel
    cfg = ImageGPTConfig(vocab_size=1001, n_embd=128, n_layer=2, n_head=4, n_positions=4096,
                         attn_implementation="eager")
    return masked_decoder(ImageGPTModel(cfg).eval())


def funnel():
    """Funnel Transformer: relative attention with the relative shift done by reshapes and a
    slice (`_relative_shift_gather`), the sequence pooled by half between its two blocks."""
    from transformers import FunnelBaseModel, FunnelConfig
    cfg = FunnelConfig(vocab_size=1000, block_sizes=[1, 1], num_decoder_layers=0, d_model=128,
                       n_head=4, d_head=32, d_inner=256, max_position_embeddings=4096)
    # Its relative-position tensors are sized with Python ints: both exporters bake the traced
    # length in, so it is exported at the length it runs at (env FUNNEL_S, default 1024).
    return text_encoder(FunnelBaseModel(cfg).eval(), seq=int(os.environ.get("FUNNEL_S", "1024")),
                        max_s=4096)


def esmfold_block():
    """ESMFold's folding-trunk block (transformers' `EsmFoldTriangularSelfAttentionBlock`, an
    OpenFold port): sequence attention biased by the pair state, outgoing and incoming triangle
    multiplications, triangle attention around the starting and the ending node, a pair MLP;
    sequence width 64, pair width 32, 4 heads of each. Without a residue mask: its attention
    masks with `mask == False`, which the TorchScript tracer cannot record."""
    from transformers.models.esm.configuration_esm import TrunkConfig
    from transformers.models.esm.modeling_esmfold import EsmFoldTriangularSelfAttentionBlock
    cfg = TrunkConfig(sequence_state_dim=64, pairwise_state_dim=32, sequence_head_width=16,
                      pairwise_head_width=8, dropout=0.0)
    blk = EsmFoldTriangularSelfAttentionBlock(cfg).eval()

    class W(nn.Module):
        def __init__(self):
            super().__init__()
            self.b = blk

        def forward(self, seq, pair):
            return self.b(seq, pair)
    L = 32
    d = Dim("L", min=2, max=4096)
    return (W(), (torch.randn(1, L, 64), torch.randn(1, L, L, 32)), ["seq", "pair"],
            ["seq_out", "pair_out"], {"seq": {1: "L"}, "pair": {1: "L", 2: "L"}},
            {"seq": {1: d}, "pair": {1: d, 2: d}})


def longformer():
    """Longformer: sliding-window attention (window 128, one-sided 64) computed in overlapping
    chunks of 2w made by `as_strided`, diagonals rearranged by pads and reshapes; no global
    tokens. The sequence is padded to a multiple of the window inside the model."""
    from transformers import LongformerConfig, LongformerModel
    cfg = LongformerConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=256, attention_window=128, max_position_embeddings=4200,
                           pad_token_id=1)
    return text_encoder(LongformerModel(cfg).eval(), seq=256, max_s=4096)


def led():
    """LED's encoder (Longformer-Encoder-Decoder, allenai): Longformer's sliding-window attention
    (window 128) with its own embeddings, layer layout and padding, from another model class."""
    from transformers import LEDConfig, LEDModel
    cfg = LEDConfig(vocab_size=1000, d_model=128, encoder_layers=2, decoder_layers=1,
                    encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=256,
                    decoder_ffn_dim=256, attention_window=128, max_encoder_position_embeddings=4200,
                    max_decoder_position_embeddings=64, pad_token_id=1)
    return text_encoder(LEDModel(cfg).eval().get_encoder(), seq=256, max_s=4096)


def bigbird():
    """BigBird: block-sparse attention (blocks of 32, 3 random blocks per row drawn with numpy at
    trace time, so fixed in the file) over a fixed length."""
    from transformers import BigBirdConfig, BigBirdModel
    cfg = BigBirdConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=256, block_size=32, num_random_blocks=3,
                        attention_type="block_sparse", max_position_embeddings=4096)
    s = int(os.environ.get("BIGBIRD_S", "1024"))
    return text_encoder(BigBirdModel(cfg).eval(), seq=s, max_s=4096)



def longt5():
    """LongT5's encoder (google): transient-global attention, each block of 16 tokens attending to
    its neighbours and to one summary token per block, with T5's bucketed relative position bias
    computed per layer from the positions."""
    from transformers import LongT5Config, LongT5EncoderModel
    cfg = LongT5Config(vocab_size=1000, d_model=128, d_kv=32, d_ff=256, num_layers=2, num_heads=4,
                       local_radius=63, global_block_size=16, encoder_attention_type="transient-global")
    m = LongT5EncoderModel(cfg).eval()
    # torch.export fails on its blocks with a symbolic length: with env LONGT5_S the file is
    # exported at that length, static.
    s = os.environ.get("LONGT5_S")
    if s is None:
        return text_encoder(m, seq=256, max_s=4096)
    mod, args, ins, outs, _, _ = text_encoder(m, seq=int(s))
    return mod, args, ins, outs, None, None



def pegasus_x():
    """PEGASUS-X's encoder (google): block-local attention over blocks of 64 tokens, staggered every
    other layer, plus global tokens every token attends to."""
    from transformers import PegasusXConfig, PegasusXModel
    cfg = PegasusXConfig(vocab_size=1000, d_model=128, encoder_layers=2, decoder_layers=1,
                         encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=256,
                         decoder_ffn_dim=256, num_global_tokens=16, block_size=64,
                         stagger_local_blocks=True, max_position_embeddings=4096)
    return text_encoder(PegasusXModel(cfg).eval().get_encoder(), seq=256, max_s=4096)



# ---- twelfth batch (OUT=target/fresh12): ALiBi, sliding windows, rotary variants, vision ----

def bloom():
    """BLOOM: ALiBi attention bias (per-head slopes times a cumsum of the attention mask), fused
    qkv, embedding layer norm; all-ones mask."""
    from transformers import BloomConfig, BloomModel
    cfg = BloomConfig(vocab_size=1000, hidden_size=128, n_layer=2, n_head=4, attn_implementation="eager")
    return masked_decoder(BloomModel(cfg).eval())


def mpt():
    """MPT: ALiBi bias built from arange over the key positions (no learned positions), fused Wqkv,
    no biases."""
    from transformers import MptConfig, MptModel
    cfg = MptConfig(vocab_size=1000, d_model=128, n_heads=4, n_layers=2, expansion_ratio=2, max_seq_len=4096,
                    attn_config={"alibi": True}, attn_implementation="eager")
    return masked_decoder(MptModel(cfg).eval())


def falcon():
    """Falcon (old architecture, RW-style): multi-query attention, parallel attention + MLP, rotary."""
    from transformers import FalconConfig, FalconModel
    cfg = FalconConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                       new_decoder_architecture=False, alibi=False, multi_query=True, parallel_attn=True,
                       max_position_embeddings=4096, attn_implementation="eager")
    return masked_decoder(FalconModel(cfg).eval())


def mistral():
    """Mistral: GQA (4 q heads, 2 kv heads), rotary, causal mask limited to a sliding window of 64."""
    from transformers import MistralConfig, MistralModel
    cfg = MistralConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, sliding_window=64,
                        max_position_embeddings=4096, attn_implementation="eager")
    # traced at 128 tokens, more than the window, so the legacy trace records the windowed mask
    return masked_decoder(MistralModel(cfg).eval(), seq=128)


def whisper_encoder():
    """Whisper's encoder: two Conv1d (the second stride 2) over 80 mel bins, sinusoidal positions
    added by shape, 2 layers. The encoder insists on T = 2 * max_source_positions (here 3000 frames,
    1500 positions, as in real Whisper), so the file is static."""
    from transformers import WhisperConfig, WhisperModel
    cfg = WhisperConfig(vocab_size=1000, d_model=128, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
                        decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256, num_mel_bins=80,
                        max_source_positions=1500, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                        decoder_start_token_id=1, attn_implementation="eager")
    enc = WhisperModel(cfg).eval().get_encoder()
    x = torch.randn(1, 80, 3000)
    return (Called(enc, ["input_features"], ["last_hidden_state"]), (x,), ["input_features"],
            ["last_hidden_state"], None, None)


def beit():
    """BEiT: per-layer relative position bias tables (window 14x14 + 3 cls entries) indexed by a
    fixed relative-position index, layer scale, mean-pooled output; static 224x224 (the bias index is
    built from Python ints)."""
    from transformers import BeitConfig, BeitModel
    cfg = BeitConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=256, image_size=224, patch_size=16, use_relative_position_bias=True,
                     use_shared_relative_position_bias=False, use_absolute_position_embeddings=False,
                     use_mean_pooling=True, attn_implementation="eager")
    m = BeitModel(cfg).eval()
    x = torch.randn(1, 3, 224, 224)
    return (Wrap(m, ["last_hidden_state"]), (x,), ["pixel_values"], ["last_hidden_state"], None, None)


def dinov2():
    """DINOv2: patch 14, position embeddings bicubically interpolated to H/14 x W/14, layer scale.
    Exported at 224x280: at the config's square 224 the interpolation is skipped (and torch.export
    then fixes the token count), so the example is non-square."""
    from transformers import Dinov2Config, Dinov2Model
    cfg = Dinov2Config(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2, image_size=224,
                       patch_size=14, attn_implementation="eager")
    m = Dinov2Model(cfg).eval()
    x = torch.randn(1, 3, 224, 280)
    return image_encoder(m, x, stride=14, max_blocks=64)


def convnext():
    """ConvNeXt: 4x4 patchify stem, 7x7 depthwise convs, channels-last layer norms (permutes), layer scale."""
    from transformers import ConvNextConfig, ConvNextModel
    cfg = ConvNextConfig(hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1])
    m = ConvNextModel(cfg).eval()
    x = torch.randn(1, 3, 224, 224)
    return image_encoder(m, x, stride=32, max_blocks=64)


def mobilevit():
    """MobileViT (small): MobileNetV2 blocks, transformer blocks over unfolded 2x2 patches
    (reshape/transpose folding), conv fusion. The dynamo file keeps H/W symbolic on its input but
    bakes the 256x256 patch counts into its reshapes (onnxruntime fails at 512x512), so only its
    export size is checked."""
    from transformers import MobileViTConfig, MobileViTModel
    cfg = MobileViTConfig(image_size=256)
    m = MobileViTModel(cfg).eval()
    # transformers' init (std-0.02 normal convs) makes the features vanish (outputs ~1e-40, denormal),
    # so a comparison says nothing: torch's default init instead
    for mod in m.modules():
        if mod is not m and hasattr(mod, "reset_parameters"):
            mod.reset_parameters()
    x = torch.randn(1, 3, 256, 256)
    return image_encoder(m, x, stride=64, max_blocks=32)


def gptj():
    """GPT-J: interleaved (rotate-every-two) partial rotary (16 of 32) from a sin/cos table, parallel
    attention + MLP."""
    from transformers import GPTJConfig, GPTJModel
    cfg = GPTJConfig(vocab_size=1000, n_embd=128, n_layer=2, n_head=4, n_inner=256, rotary_dim=16,
                     n_positions=4096, attn_implementation="eager")
    return masked_decoder(GPTJModel(cfg).eval())


def modernbert():
    """ModernBERT: alternating global and local (window 64) attention, rotary with separate global /
    local bases, GeGLU MLP, no biases; unpadded (no mask) input."""
    from transformers import ModernBertConfig, ModernBertModel
    cfg = ModernBertConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                           num_attention_heads=4, local_attention=64, max_position_embeddings=4096,
                           pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2,
                           layer_types=["full_attention", "sliding_attention"], attn_implementation="eager")
    return text_encoder(ModernBertModel(cfg).eval(), seq=128, max_s=4096)


def t5gemma():
    """T5Gemma's encoder: bidirectional Gemma-2 layers alternating sliding-window (64) and full
    attention, attention-logit softcapping (tanh), GQA, rotary, RMS norms before and after each block."""
    from transformers import T5GemmaConfig, T5GemmaEncoderModel, T5GemmaModuleConfig
    mod = dict(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, head_dim=32, query_pre_attn_scalar=32, sliding_window=64,
               max_position_embeddings=4096, layer_types=["sliding_attention", "full_attention"])
    cfg = T5GemmaConfig(encoder=T5GemmaModuleConfig(**mod), decoder=T5GemmaModuleConfig(**mod), vocab_size=1000,
                        is_encoder_decoder=False)
    cfg._attn_implementation = "eager"
    m = T5GemmaEncoderModel(cfg).eval()
    # traced at 128 tokens, more than the window, so the legacy trace records the windowed mask
    return text_encoder(m, seq=128, max_s=4096)


# ---- thirteenth batch (OUT=target/fresh13): dynamic conv, char models, MoE, conformer, vision ----

def convbert():
    """ConvBERT: mixed attention, half the heads replaced by span-based dynamic convolution (kernel 9,
    per-token kernels from a depthwise-separable conv, unfold of the value map)."""
    from transformers import ConvBertConfig, ConvBertModel
    cfg = ConvBertConfig(vocab_size=1000, hidden_size=128, embedding_size=128, num_hidden_layers=2,
                         num_attention_heads=4, intermediate_size=256, head_ratio=2, conv_kernel_size=9,
                         max_position_embeddings=4096)
    return text_encoder(ConvBertModel(cfg).eval(), seq=64, max_s=4096)


def canine():
    """CANINE-s: hashed character embeddings (8 hash functions), a local (chunked, 128-wide) initial
    transformer, strided-conv downsampling (rate 4), deep transformer, repeat-upsampling and a final
    conv + transformer. Ids are small codepoints; traced at 256 (several chunks)."""
    from transformers import CanineConfig, CanineModel
    cfg = CanineConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                       downsampling_rate=4, num_hash_functions=8, num_hash_buckets=4096,
                       max_position_embeddings=4096, local_transformer_stride=128)
    return text_encoder(CanineModel(cfg).eval(), vocab=1000, seq=256, max_s=4096)


def yoso():
    """YOSO: LSH-expectation attention (use_expectation: (1 - acos(q.k)/pi)^tau with unit q/k,
    an autograd.Function), depthwise conv over values."""
    from transformers import YosoConfig, YosoModel
    cfg = YosoConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=256, max_position_embeddings=4096, use_expectation=True,
                     conv_window=None)
    return text_encoder(YosoModel(cfg).eval(), seq=64, max_s=4000)


def swin():
    """transformers' Swin: 7x7 windows, shifted (torch.roll) every other block, padding to window
    multiples, relative position bias by index; 2 stages (patch 4, one patch merging). H = W = 56*h
    (the stage sizes multiples of the window; 224x224 example)."""
    from transformers import SwinConfig, SwinModel
    cfg = SwinConfig(image_size=224, patch_size=4, embed_dim=32, depths=[2, 2], num_heads=[2, 4],
                     window_size=7, mlp_ratio=2.0)
    m = SwinModel(cfg).eval()
    x = torch.randn(1, 3, 224, 224)
    return image_encoder(m, x, stride=56, max_blocks=16)


def levit():
    """LeViT: conv stem (4 stride-2 convs), attention with per-head biases gathered by a fixed index
    (built from Python ints: static 224x224), subsampling attention, hardswish, BatchNorm linears
    (statistics calibrated, `bn_calibrated`)."""
    from transformers import LevitConfig, LevitModel
    cfg = LevitConfig(image_size=224, hidden_sizes=[64, 128, 192], num_attention_heads=[2, 4, 6],
                      depths=[1, 1, 1], key_dim=[16, 16, 16], attention_ratio=[2, 2, 2], mlp_ratio=[2, 2, 2])
    m = LevitModel(cfg).eval()
    x = torch.randn(1, 3, 224, 224)
    # the features vanish with the init's BatchNorm statistics (outputs ~1e-8): calibrated
    return bn_calibrated((Wrap(m, ["last_hidden_state"]), (x,), ["pixel_values"], ["last_hidden_state"], None, None))


def pvt():
    """PVT v1: spatial-reduction attention (k/v from a strided conv, ratios 8/4/2/1), position
    embeddings per stage (interpolated away from 224)."""
    from transformers import PvtConfig, PvtModel
    cfg = PvtConfig(image_size=224, num_encoder_blocks=4, depths=[1, 1, 1, 1], sequence_reduction_ratios=[8, 4, 2, 1],
                    hidden_sizes=[16, 32, 64, 128], num_attention_heads=[1, 2, 2, 4], mlp_ratios=[2, 2, 2, 2])
    m = PvtModel(cfg).eval()
    x = torch.randn(1, 3, 224, 224)
    return image_encoder(m, x, stride=32, max_blocks=64)


def regnet():
    """RegNet (Y): grouped 3x3 convs (group width 8), squeeze-excitation, 4 stages."""
    from transformers import RegNetConfig, RegNetModel
    cfg = RegNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 2, 1], groups_width=8,
                       layer_type="y")
    m = RegNetModel(cfg).eval()
    x = torch.randn(1, 3, 224, 224)
    return image_encoder(m, x, stride=32, max_blocks=64)


def umt5():
    """UMT5's encoder: T5 with a bucketed relative position bias computed in every layer (not shared)."""
    from transformers import UMT5Config, UMT5EncoderModel
    cfg = UMT5Config(vocab_size=1000, d_model=128, d_kv=32, d_ff=256, num_layers=2, num_heads=4,
                     relative_attention_num_buckets=32, relative_attention_max_distance=128)
    return text_encoder(UMT5EncoderModel(cfg).eval(), seq=64, max_s=4096)


def switch_transformers():
    """Switch Transformers' encoder: every layer's MLP a mixture of 4 experts with top-1 routing
    (capacity 64 per expert, tokens over it pass unchanged), experts run on the tokens routed to them
    (nonzero / index_add)."""
    from transformers import SwitchTransformersConfig, SwitchTransformersEncoderModel
    cfg = SwitchTransformersConfig(vocab_size=1000, d_model=128, d_kv=32, d_ff=256, num_layers=2,
                                   num_sparse_encoder_layers=2, num_decoder_layers=2, num_sparse_decoder_layers=2,
                                   num_heads=4, num_experts=4, expert_capacity=64,
                                   relative_attention_num_buckets=32)
    m = SwitchTransformersEncoderModel(cfg).eval()
    # with no mask, its encoder indexes a None mask under torch.export ("'NoneType' object is not
    # subscriptable"): an all-ones mask passed, for both exporters
    ids = torch.randint(0, 1000, (1, 64))
    return (OnesMaskedEncoder(m), (ids,), ["input_ids"], ["last_hidden_state"],
            {"input_ids": {1: "S"}}, {"input_ids": {1: Dim("S", min=2, max=4096)}})


class OnesMaskedEncoder(nn.Module):
    """`last_hidden_state` of an encoder for `input_ids` with an all-ones `attention_mask`."""
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).last_hidden_state


def wav2vec2_conformer():
    """Wav2Vec2-Conformer: conv feature encoder (7 layers, 320x downsampling), conformer blocks with
    relative (Transformer-XL) positional attention and rel-shift, depthwise conv module (kernel 31)."""
    from transformers import Wav2Vec2ConformerConfig, Wav2Vec2ConformerModel
    cfg = Wav2Vec2ConformerConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=256, conv_dim=(32,) * 7, conv_stride=(5, 2, 2, 2, 2, 2, 2),
                                  conv_kernel=(10, 3, 3, 3, 3, 2, 2), num_conv_pos_embeddings=16,
                                  num_conv_pos_embedding_groups=4, position_embeddings_type="relative",
                                  conv_depthwise_kernel_size=31, feat_extract_norm="group",
                                  apply_spec_augment=False, max_source_positions=5000)
    m = Wav2Vec2ConformerModel(cfg).eval()
    x = torch.randn(1, 16000)
    return (Wrap(m, ["last_hidden_state"]), (x,), ["input_values"], ["last_hidden_state"],
            {"input_values": {1: "T"}}, {"input_values": {1: Dim("T", min=400, max=400000)}})


def bn_calibrated(spec):
    """`spec` (tv_model's tuple) with its BatchNorm running statistics set from one random batch: with
    torchvision's init (running var 1) the features of these nets shrink ~10x per block (logits ~1e-14),
    and a comparison then says nothing."""
    m = spec[0]
    for mod in m.modules():
        if isinstance(mod, nn.modules.batchnorm._BatchNorm):
            mod.reset_running_stats()
            mod.momentum = None
    m.train()
    with torch.no_grad():
        m(torch.randn(4, 3, 224, 224))
    m.eval()
    return spec


def efficientnet_b0():
    """torchvision EfficientNet-B0: MBConv with squeeze-excitation, SiLU, depthwise 3x3/5x5
    (BatchNorm statistics calibrated, `bn_calibrated`)."""
    return bn_calibrated(tv_model("efficientnet_b0"))


def mobilenet_v3_small():
    """torchvision MobileNetV3-Small: hardswish / hardsigmoid, SE blocks, depthwise convs
    (BatchNorm statistics calibrated, `bn_calibrated`)."""
    return bn_calibrated(tv_model("mobilenet_v3_small"))


def vit_b_16():
    """torchvision ViT-B/16 (full size, 86M parameters): class token, learned positions for 14x14
    patches (fixed 224x224). nn.MultiheadAttention's fast path (`aten::_native_multi_head_attention`,
    which the TorchScript exporter cannot export) is turned off."""
    torch.backends.mha.set_fastpath_enabled(False)
    spec = tv_model("vit_b_16", dyn=False)
    # torchvision zero-initializes the head (logits all 0, a comparison says nothing): a random head
    nn.init.normal_(spec[0].heads.head.weight, std=0.02)
    return spec


MODELS = dict(deberta=deberta, wav2vec2=wav2vec2, bart=bart, qwen2=qwen2, phi=phi, gemma=gemma, segformer=segformer, rnn=rnn,
              fcn=fcn, deeplab=deeplab, r3d=r3d, clip=clip,
              xlnet=xlnet, roformer=roformer, mpnet=mpnet, opt=opt, nystromformer=nystromformer,
              perceiver=perceiver, patchtst=patchtst, hubert=hubert, squeezebert=squeezebert, cvt=cvt,
              poolformer=poolformer, vitmae=vitmae, reformer=reformer, swin_v2_t=swin_v2_t,
              maxvit_t=maxvit_t, googlenet=googlenet,
              gpt_neo=gpt_neo, codegen=codegen, gpt_bigcode=gpt_bigcode, biogpt=biogpt, xglm=xglm,
              electra=electra, fnet=fnet, mamba=mamba, openai_gpt=openai_gpt, imagegpt=imagegpt, funnel=funnel,
              esmfold_block=esmfold_block, longformer=longformer, led=led, bigbird=bigbird, longt5=longt5, pegasus_x=pegasus_x,
              bloom=bloom, mpt=mpt, falcon=falcon, mistral=mistral, whisper_encoder=whisper_encoder,
              beit=beit, dinov2=dinov2, convnext=convnext, mobilevit=mobilevit, gptj=gptj,
              modernbert=modernbert, t5gemma=t5gemma,
              convbert=convbert, canine=canine, yoso=yoso, swin=swin, levit=levit, pvt=pvt, regnet=regnet,
              umt5=umt5, switch_transformers=switch_transformers, wav2vec2_conformer=wav2vec2_conformer,
              efficientnet_b0=efficientnet_b0, mobilenet_v3_small=mobilenet_v3_small, vit_b_16=vit_b_16)

def versions():
    """The versions of the packages an export depends on, by package (absent ones left out)."""
    import importlib.metadata as md
    out = {"python": sys.version.split()[0]}
    for p in ("torch", "transformers", "torchvision", "onnx", "onnxscript"):
        try:
            out[p] = md.version(p)
        except md.PackageNotFoundError:
            pass
    return out


def record(f):
    """Writes the versions beside the export `f` and prints them."""
    import json
    v = versions()
    with open(f[: -len(".onnx")] + ".versions.json", "w") as fh:
        json.dump(v, fh, indent=1)
    print("  written with", ", ".join(f"{k} {x}" for k, x in v.items()))


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
                record(f)
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
                record(f)
            except Exception:
                traceback.print_exc()
                print("FAIL dynamo", name)
