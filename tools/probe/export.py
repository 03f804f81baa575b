"""Probe exports: models from public packages that the corpora do not hold, exported with both
torch exporters into /tmp/probe (not checked in: some are large), with inputs and onnxruntime
outputs, to try memplan on files it has never seen. `check.sh STEM` then runs every stage
(inspect, run vs onnxruntime, estimate at the run's dims, optimize at resident + half the rest,
planned run bit-identical). 2026-11-25: swin_v2, yolos, detr, maxvit, convnextv2, retinanet pass
(legacy exports; dynamo could not export most with dynamic H, W); maskrcnn does not (a Loop body
resizes by sizes computed from box coordinates).

    mkdir -p /tmp/probe && .venv/bin/python tools/probe/export.py retinanet
    tools/probe/check.sh retinanet.legacy
"""
import sys, torch, numpy as np, traceback, onnxruntime as ort
torch.manual_seed(0)
which = sys.argv[1]
out = f"/tmp/probe/{which}"

def build():
    if which == "swin_v2":
        from torchvision.models.swin_transformer import SwinTransformer, SwinTransformerBlockV2, PatchMergingV2
        m = SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[1, 1], num_heads=[1, 2], window_size=[4, 4],
                            stochastic_depth_prob=0.0, num_classes=5, block=SwinTransformerBlockV2, downsample_layer=PatchMergingV2)
        return m, {"x": torch.randn(1, 3, 40, 56)}, {"x": {0: "B", 2: "H", 3: "W"}}
    if which == "yolos":
        from transformers import YolosConfig, YolosForObjectDetection
        cfg = YolosConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                          image_size=[64, 64], patch_size=16, num_detection_tokens=5, num_labels=3)
        m = YolosForObjectDetection(cfg)
        class W(torch.nn.Module):
            def __init__(s): super().__init__(); s.m = m
            def forward(s, x): o = s.m(pixel_values=x); return o.logits, o.pred_boxes
        return W(), {"x": torch.randn(1, 3, 64, 96)}, {"x": {0: "B", 2: "H", 3: "W"}}
    if which == "detr":
        from transformers import DetrConfig, DetrForObjectDetection, ResNetConfig
        bc = ResNetConfig(embedding_size=8, hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1], out_features=["stage4"])
        cfg = DetrConfig(use_timm_backbone=False, backbone_config=bc, d_model=32, encoder_layers=1, decoder_layers=1,
                         encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
                         num_queries=5, num_labels=3, use_pretrained_backbone=False)
        m = DetrForObjectDetection(cfg)
        class W(torch.nn.Module):
            def __init__(s): super().__init__(); s.m = m
            def forward(s, x): o = s.m(pixel_values=x); return o.logits, o.pred_boxes
        return W(), {"x": torch.randn(1, 3, 64, 96)}, {"x": {0: "B", 2: "H", 3: "W"}}
    if which == "maxvit":
        from torchvision.models.maxvit import MaxVit
        m = MaxVit(input_size=(64, 64), stem_channels=8, partition_size=2, block_channels=[8, 16], block_layers=[1, 1],
                   head_dim=4, stochastic_depth_prob=0.0, num_classes=5)
        return m, {"x": torch.randn(2, 3, 64, 64)}, {"x": {0: "B"}}
    if which == "convnextv2":
        from transformers import ConvNextV2Config, ConvNextV2Model
        m = ConvNextV2Model(ConvNextV2Config(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2))
        class W(torch.nn.Module):
            def __init__(s): super().__init__(); s.m = m
            def forward(s, x): return s.m(pixel_values=x).last_hidden_state
        return W(), {"x": torch.randn(1, 3, 64, 64)}, {"x": {0: "B", 2: "H", 3: "W"}}
    if which == "gpt2_past":
        from transformers import GPT2Config, GPT2LMHeadModel
        m = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=128))
        class W(torch.nn.Module):
            def __init__(s): super().__init__(); s.m = m
            def forward(s, ids, mask): return s.m(input_ids=ids, attention_mask=mask, use_cache=False).logits
        return W(), {"ids": torch.randint(0, 100, (2, 12)), "mask": torch.ones(2, 12, dtype=torch.int64)}, {"ids": {0: "B", 1: "S"}, "mask": {0: "B", 1: "S"}}
    if which in ("maskrcnn", "keypointrcnn", "retinanet", "fcos"):
        import torchvision
        from torchvision.models.detection import MaskRCNN, KeypointRCNN, RetinaNet, FCOS
        from torchvision.models.detection.anchor_utils import AnchorGenerator
        bb = torchvision.models.mobilenet_v3_small(weights=None, width_mult=0.5).features
        bb.out_channels = 288
        kw = dict(min_size=64, max_size=128)
        if which in ("maskrcnn", "keypointrcnn"):
            ag = AnchorGenerator(sizes=((16, 32, 64),), aspect_ratios=((0.5, 1.0, 2.0),))
            pool = torchvision.ops.MultiScaleRoIAlign(featmap_names=["0"], output_size=7, sampling_ratio=2)
            mpool = torchvision.ops.MultiScaleRoIAlign(featmap_names=["0"], output_size=14, sampling_ratio=2)
            if which == "maskrcnn":
                m = MaskRCNN(bb, num_classes=3, rpn_anchor_generator=ag, box_roi_pool=pool, mask_roi_pool=mpool,
                             rpn_post_nms_top_n_test=20, box_detections_per_img=10, **kw)
            else:
                m = KeypointRCNN(bb, num_classes=2, rpn_anchor_generator=ag, box_roi_pool=pool, keypoint_roi_pool=mpool,
                                 num_keypoints=5, rpn_post_nms_top_n_test=20, box_detections_per_img=10, **kw)
        else:
            ag = AnchorGenerator(sizes=((16, 32, 64),), aspect_ratios=((0.5, 1.0, 2.0),))
            if which == "retinanet":
                m = RetinaNet(bb, num_classes=3, anchor_generator=ag, detections_per_img=10, topk_candidates=50, **kw)
            else:
                m = FCOS(bb, num_classes=3, anchor_generator=AnchorGenerator(sizes=((8,),), aspect_ratios=((1.0,),)),
                         detections_per_img=10, topk_candidates=50, **kw)
        class W(torch.nn.Module):
            def __init__(s): super().__init__(); s.m = m
            def forward(s, x):
                o = s.m(list(x))[0]
                return tuple(o.values())
        return W(), {"x": torch.rand(1, 3, 64, 96)}, {"x": {0: "B", 2: "H", 3: "W"}}
    raise SystemExit("unknown")

m, ins, dyn = build()
m.eval()
names = list(ins)
for dynamo in (False, True):
    f = out + (".onnx" if dynamo else ".legacy.onnx")
    try:
        with torch.no_grad():
            if dynamo:
                ds = {k: {ax: torch.export.Dim(n, min=2, max=4096) for ax, n in v.items()} for k, v in dyn.items()}
                torch.onnx.export(m, tuple(ins.values()), f, input_names=names, dynamic_shapes=ds, dynamo=True, opset_version=18)
            else:
                torch.onnx.export(m, tuple(ins.values()), f, input_names=names, dynamic_axes=dyn, dynamo=False, opset_version=18)
        sess = ort.InferenceSession(f)
        feed = {i.name: ins[i.name].numpy() for i in sess.get_inputs()}
        outs = sess.run(None, feed)
        np.savez(out + ("" if dynamo else ".legacy") + "_in.npz", **feed)
        np.savez(out + ("" if dynamo else ".legacy") + "_ort.npz", **{o.name: v for o, v in zip(sess.get_outputs(), outs)})
        print("OK", f)
    except Exception as e:
        print("FAIL", f, str(e).splitlines()[0][:200])
