#!/usr/bin/env python3
"""hf_ref.py — the reference side of the Hugging Face folder tests: folders as transformers and
tokenizers write them, and what those libraries answer for them.

  tokenizer DIR STYLE
      a BPE tokenizer trained here by `tokenizers` on a multilingual text and saved with
      transformers' PreTrainedTokenizerFast (tokenizer.json, tokenizer_config.json with the
      family's chat template). STYLE: llama3 (Llama 3's split pattern, ByteLevel, ignore_merges,
      the BOS template), qwen (NFC, Qwen2's pattern, ChatML, <tool_call> tokens), mistral
      (Metaspace, byte_fallback, <s> BOS), legacy (Llama 2: Prepend and Replace normalizers),
      gpt2 (GPT-2's ByteLevel with its own pattern, as transformers 5 saves GPT-2: tokenizer.json only).
  model DIR ARCH [--dtype float32|float16|bfloat16] [--shard BYTES] [--seed S] [--rope JSON] [--size test|bench|large]
      a model of ARCH (llama, mistral, qwen2, qwen3) with random weights of the folder's
      vocabulary, written by transformers' save_pretrained (sharded when --shard is given), with
      generation_config.json's EOS a list. Without PyTorch 2 (Debian's is 1.13) the same folder
      is written here: config.json as transformers 5 writes it, safetensors byte by byte.
  greedy DIR N PROMPTS_JSON
      generate()'s greedy tokens for each prompt, as a JSON list; without PyTorch 2, the same
      decoder written out in PyTorch below (own_greedy), checked against generate() where both run.
  encode DIR TEXTS_JSON
      the tokenizer's ids for each text (add_special_tokens=True), as JSON.
  texts
      the multilingual texts the parity tests encode (Hindi, Arabic, Thai, CJK, Cyrillic, ½ ² ①,
      NBSP, emoji, code, runs of spaces and newlines), as JSON.
  crafted DIR STYLE OUTPUT_TEXT REQUEST_JSON [OPENING]
      a tokenizer of STYLE and a one-layer GPT-2 whose attention and MLP are zero and whose
      position embeddings are basis vectors: its next token depends on the position alone, and
      the lm_head makes it write OUTPUT_TEXT (then EOS) after the chat prompt of REQUEST_JSON's
      messages and tools, rendered by Jinja2 from the folder's template: a model that answers
      with a crafted tool call (after OPENING, what a required call writes after the prompt).
  chat DIR MESSAGES_JSON
      apply_chat_template(messages, add_generation_prompt=True, tokenize=False), as JSON text.
"""
import json, os, sys

TEXTS = [
    "Hello, world! It's 2026 and we're serving models.",
    "नमस्ते दुनिया, यह एक परीक्षण वाक्य है।",
    "مرحبا بالعالم، هذا اختبار ٣٤٥ للأرقام",
    "สวัสดีชาวโลก นี่คือประโยคทดสอบภาษาไทย",
    "你好，世界！这是一个测试。日本語のテキストも。한국어 문장",
    "Привет, мир! Съешь же ещё этих мягких французских булок.",
    "½ ² ① ⅷ x² 3½ and café vs cafe\u0301 (NFC)",
    "non\u00a0breaking\u00a0space and\u2003em space",
    "emoji 🎉🚀👍🏽 and 👨‍👩‍👧 family",
    "def f(x):\n    return x ** 2  # square\n\n\n\tindented\ttabs",
    "many     spaces   and\n\n\n\nnewlines  \n  end   ",
    "numbers 1234567 3.14159 -42 1e10 0x1F",
    "<|im_start|>not special here? <s> and </s> mid text",
    "",
    " leading space",
    "trailing space ",
]

CORPUS = TEXTS * 3 + [
    "The quick brown fox jumps over the lazy dog. " * 4,
    "In the beginning was the word, and the word was served at speed. " * 3,
    "def main():\n    print('hello')\n    for i in range(10):\n        yield i\n",
    "संख्या एक दो तीन चार पांच छह सात आठ नौ दस " * 3,
    "ภาษาไทยเป็นภาษาที่มีวรรณยุกต์ " * 3,
    "الرجاء كتابة النص باللغة العربية " * 3,
    "机器学习和深度学习正在改变世界 " * 3,
    "Машинное обучение меняет мир " * 3,
]

LLAMA3_PAT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN_PAT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"

LLAMA3_TEMPLATE = ("{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
                   "message['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}"
                   "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")
QWEN_TEMPLATE = ("{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
                 "{{- '# Tools\\n\\nYou may call one or more functions.\\n<tools>' }}{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
                 "{{- '\\n</tools>\\n\\nReturn a JSON object inside <tool_call></tool_call> tags.<|im_end|>\\n' }}"
                 "{%- else %}{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
                 "{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}{%- endif %}"
                 "{%- for message in messages %}{%- if message.role != 'system' or not loop.first %}"
                 "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
                 "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
MISTRAL_TEMPLATE = ("{{- bos_token }}{%- for message in messages %}{%- if message['role'] == 'user' %}{{- '[INST] ' + message['content'] + ' [/INST]' }}"
                    "{%- elif message['role'] == 'assistant' %}{{- ' ' + message['content'] + eos_token }}{%- elif message['role'] == 'system' %}"
                    "{{- '[INST] ' + message['content'] + ' [/INST]' }}{%- endif %}{%- endfor %}")


def tokenizer(out, style):
    from tokenizers import Tokenizer, Regex, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast
    if style == "gpt2":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=800, special_tokens=["<|endoftext|>"],
                                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
        kw = dict(bos_token="<|endoftext|>", eos_token="<|endoftext|>", chat_template=QWEN_TEMPLATE.replace("<|im_end|>", "<|endoftext|>"))
    elif style in ("llama3", "qwen"):
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|python_tag|>"] if style == "llama3" \
            else ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        tok = Tokenizer(models.BPE(ignore_merges=style == "llama3"))
        if style == "qwen":
            tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PAT if style == "llama3" else QWEN_PAT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        tok.train_from_iterator(CORPUS, trainer)
        if style == "qwen":
            tok.add_tokens(["<tool_call>", "</tool_call>"])
            tok.post_processor = processors.ByteLevel(trim_offsets=False)
            kw = dict(eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=QWEN_TEMPLATE)
        else:
            bos = tok.token_to_id("<|begin_of_text|>")
            tok.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=False),
                                                      processors.TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])])
            kw = dict(bos_token="<|begin_of_text|>", eos_token="<|eot_id|>", chat_template=LLAMA3_TEMPLATE)
    else:
        specials = ["<unk>", "<s>", "</s>", "[TOOL_CALLS]"] + ["<0x%02X>" % i for i in range(256)]
        tok = Tokenizer(models.BPE(byte_fallback=True, fuse_unk=True, unk_token="<unk>"))
        if style == "legacy":
            tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
        else:
            tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
        tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
        trainer = trainers.BpeTrainer(vocab_size=1100, special_tokens=specials, show_progress=False, limit_alphabet=200)
        tok.train_from_iterator(CORPUS, trainer)
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
        # The byte tokens live in the model's vocabulary, as SentencePiece's conversions have them.
        j = json.loads(tok.to_str())
        j["added_tokens"] = [t for t in j["added_tokens"] if not t["content"].startswith("<0x")]
        tok = Tokenizer.from_str(json.dumps(j))
        kw = dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>", chat_template=MISTRAL_TEMPLATE)
    os.makedirs(out, exist_ok=True)
    PreTrainedTokenizerFast(tokenizer_object=tok, **kw).save_pretrained(out)


SIZES = {"test": dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2),
         # Llama 3's shape, small: grouped-query attention with 4 query heads per KV head, head_dim 64
         "bench": dict(hidden_size=512, intermediate_size=1792, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2),
         "large": dict(hidden_size=1536, intermediate_size=4096, num_hidden_layers=8, num_attention_heads=12, num_key_value_heads=4)}


def model(out, arch, dtype="float32", shard=None, seed=1, rope=None, size="test"):
    if not have_transformers_torch():
        if size != "test":
            raise SystemExit("hf_ref.py: --size " + size + " needs PyTorch 2 and transformers")
        return own_model(out, arch, dtype, shard, seed, rope)
    import torch, transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(out)
    vocab = len(tok) + 7  # as published models pad theirs
    kw = dict(vocab_size=vocab, max_position_embeddings=256, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    if arch == "gpt2":
        cfg = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=256, vocab_size=vocab,
                                      bos_token_id=kw["bos_token_id"], eos_token_id=kw["eos_token_id"])
    else:
        common = dict(**SIZES[size], rms_norm_eps=1e-5, **kw)
        if size == "large":
            common["vocab_size"] = 32000
        if rope:
            common["rope_scaling"] = json.loads(rope)
        cls = {"llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig,
               "qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config}[arch]
        extra = {"mistral": dict(sliding_window=12), "qwen2": dict(tie_word_embeddings=True), "qwen3": dict(head_dim=24, attention_bias=True),
                 "llama": dict(rope_theta=50000.0, mlp_bias=True, attention_bias=True)}[arch] if size == "test" else {}
        cfg = cls(**common, **extra)
    torch.manual_seed(seed)
    m = AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name or name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * (0.3 if "embed" in name or "wte" in name or "wpe" in name else 0.12))
    m = m.to(getattr(torch, dtype))
    m.generation_config.eos_token_id = [tok.eos_token_id, tok.convert_tokens_to_ids(tok.pad_token or tok.eos_token)]
    m.save_pretrained(out, max_shard_size=int(shard) if shard else "50GB")


def have_transformers_torch():
    try:
        import torch
        if int(torch.__version__.split(".")[0]) < 2:
            return False
        from transformers import AutoModelForCausalLM  # noqa: F401
        return True
    except Exception:
        return False


# ---------------------------------------------------------------- without transformers' models

ARCHS = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}


def own_config(arch, vocab, tok_cfg, rope):
    c = {"architectures": [ARCHS[arch]], "model_type": arch, "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "vocab_size": vocab, "max_position_embeddings": 256,
         "hidden_act": "silu", "tie_word_embeddings": arch == "qwen2", "dtype": "float32", "transformers_version": "5.25.0",
         "rope_parameters": {"rope_theta": 50000.0 if arch == "llama" else 10000.0, "rope_type": "default"}}
    c.update({"mistral": dict(sliding_window=12), "qwen2": dict(use_sliding_window=False, sliding_window=None),
              "qwen3": dict(head_dim=24, attention_bias=True), "llama": dict(mlp_bias=True, attention_bias=True)}[arch])
    if rope:
        c["rope_parameters"].update(json.loads(rope))
    return c


def write_safetensors(path, tensors, dtype):
    import struct, torch
    code = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}[dtype]
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, v in tensors.items():
        t = v.to(getattr(torch, dtype)).contiguous()
        raw = (t.view(torch.int16) if dtype == "bfloat16" else t).numpy().tobytes()
        header[name] = {"dtype": code, "shape": list(v.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def own_model(out, arch, dtype, shard, seed, rope):
    import torch
    cfg_tok = json.load(open(out + "/tokenizer_config.json"))
    vocab = len(json.load(open(out + "/tokenizer.json"))["model"]["vocab"]) + 7 + len(json.load(open(out + "/tokenizer.json"))["added_tokens"])
    c = own_config(arch, vocab, cfg_tok, rope)
    g = torch.Generator().manual_seed(seed)
    C, F, H, K = c["hidden_size"], c["intermediate_size"], c["num_attention_heads"], c["num_key_value_heads"]
    hs = c.get("head_dim", C // H)
    rnd = lambda *s, std=0.12: torch.randn(*s, generator=g) * std
    t = {"model.embed_tokens.weight": rnd(vocab, C, std=0.3), "model.norm.weight": 1 + rnd(C, std=0.1)}
    if not c["tie_word_embeddings"]:
        t["lm_head.weight"] = rnd(vocab, C)
    bias = c.get("attention_bias", False) or arch == "qwen2"
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        t[p + "input_layernorm.weight"] = 1 + rnd(C, std=0.1)
        t[p + "post_attention_layernorm.weight"] = 1 + rnd(C, std=0.1)
        for n, rows in (("q", H * hs), ("k", K * hs), ("v", K * hs)):
            t[p + f"self_attn.{n}_proj.weight"] = rnd(rows, C)
            if bias:
                t[p + f"self_attn.{n}_proj.bias"] = rnd(rows)
        t[p + "self_attn.o_proj.weight"] = rnd(C, H * hs)
        if c.get("attention_bias"):
            t[p + "self_attn.o_proj.bias"] = rnd(C)
        if arch == "qwen3":
            t[p + "self_attn.q_norm.weight"] = 1 + rnd(hs, std=0.1)
            t[p + "self_attn.k_norm.weight"] = 1 + rnd(hs, std=0.1)
        for n, shape in (("gate", (F, C)), ("up", (F, C)), ("down", (C, F))):
            t[p + f"mlp.{n}_proj.weight"] = rnd(*shape)
            if c.get("mlp_bias"):
                t[p + f"mlp.{n}_proj.bias"] = rnd(shape[0])
    c["dtype"] = dtype
    json.dump(c, open(out + "/config.json", "w"), indent=2)
    eos = [i for i in (json.load(open(out + "/tokenizer.json"))["added_tokens"]) if i["content"] == cfg_tok.get("eos_token")]
    json.dump({"eos_token_id": [eos[0]["id"], 0] if eos else 0, "transformers_version": "5.25.0"}, open(out + "/generation_config.json", "w"))
    if not shard:
        return write_safetensors(out + "/model.safetensors", t, dtype)
    names = list(t)
    per = max(1, len(names) // 5)
    groups = [names[i:i + per] for i in range(0, len(names), per)]
    wm = {}
    for i, grp in enumerate(groups):
        f = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        write_safetensors(out + "/" + f, {n: t[n] for n in grp}, dtype)
        wm.update({n: f for n in grp})
    json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, open(out + "/model.safetensors.index.json", "w"), indent=2)


def read_folder(folder):
    import os, struct, torch
    files = sorted({v for v in json.load(open(folder + "/model.safetensors.index.json"))["weight_map"].values()}) \
        if os.path.exists(folder + "/model.safetensors.index.json") else ["model.safetensors"]
    out = {}
    for f in files:
        raw = open(folder + "/" + f, "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        header = json.loads(raw[8:8 + n])
        for name, e in header.items():
            if name == "__metadata__":
                continue
            b, end = e["data_offsets"]
            buf = bytearray(raw[8 + n + b:8 + n + end])
            dt = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.int16, "I8": torch.int8}[e["dtype"]]
            v = torch.frombuffer(buf, dtype=dt)
            v = v.view(torch.bfloat16) if e["dtype"] == "BF16" else v
            out[name] = v.float().reshape(e["shape"])
    return out


def inv_freq(c, hs):
    """transformers' rope init functions (default, linear, llama3, yarn) in float32."""
    import math, torch
    r = c.get("rope_parameters") or c.get("rope_scaling") or {}
    base = r.get("rope_theta", c.get("rope_theta", 10000.0))
    f = 1.0 / (base ** (torch.arange(0, hs, 2, dtype=torch.int64).float() / hs))
    kind, af = r.get("rope_type", r.get("type", "default")), 1.0
    if kind == "linear":
        f = f / r["factor"]
    elif kind == "llama3":
        orig, lo, hi, fac = r["original_max_position_embeddings"], r["low_freq_factor"], r["high_freq_factor"], r["factor"]
        wl = 2 * math.pi / f
        g = torch.where(wl > orig / lo, f / fac, f)
        s = (orig / wl - lo) / (hi - lo)
        mid = ~(wl < orig / hi) * ~(wl > orig / lo)
        f = torch.where(mid, (1 - s) * g / fac + s * g, g)
    elif kind == "yarn":
        fac, orig = r["factor"], r.get("original_max_position_embeddings", c["max_position_embeddings"])
        af = r.get("attention_factor") or (0.1 * math.log(fac) + 1.0 if fac > 1 else 1.0)
        dim_of = lambda rot: (hs * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))
        lo, hi = max(math.floor(dim_of(r.get("beta_fast") or 32)), 0), min(math.ceil(dim_of(r.get("beta_slow") or 1)), hs - 1)
        ramp = torch.clamp((torch.arange(hs // 2, dtype=torch.float32) - lo) / ((hi - lo) or 0.001), 0, 1)
        keep = 1 - ramp
        pos = base ** (torch.arange(0, hs, 2).float() / hs)
        f = (1.0 / (fac * pos)) * (1 - keep) + (1.0 / pos) * keep
    elif kind != "default":
        raise SystemExit("hf_ref.py: rope type " + kind + " has no reference here")
    return f, af


def int8_linear(x, q, scale):
    """Loom's int8 layer: each row of x quantized as it comes (affine, [0, 127], round half to even),
    integer products summed exactly, then scaled by the row's and the output channel's scales."""
    import torch
    lo, hi = x.min(-1, keepdim=True).values.clamp(max=0), x.max(-1, keepdim=True).values.clamp(min=0)
    sx = ((hi - lo) / 127).clamp(min=torch.finfo(torch.float32).eps)
    zp = torch.round(-lo / sx).clamp(0, 127)
    xq = torch.round((x * (1.0 / sx) + zp).clamp(0, 127))
    acc = (xq.double() - zp.double()) @ q.double().T
    return acc.float() * (sx * scale.reshape(1, -1))


def own_forward(c, w, ids):
    import torch
    C, H, K = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    hs, T, eps = c.get("head_dim") or C // H, len(ids), c["rms_norm_eps"]
    rms = lambda x, g: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g
    f, af = inv_freq(c, hs)
    ang = torch.arange(T).float()[:, None] * f[None, :]
    cos, sin = torch.cat([ang, ang], -1).cos() * af, torch.cat([ang, ang], -1).sin() * af
    rot = lambda x: x * cos[:, None] + torch.cat([-x[..., hs // 2:], x[..., :hs // 2]], -1) * sin[:, None]
    mm = lambda x, n: int8_linear(x, w[n + ".weight"], w[n + ".weight_scale"]) if n + ".weight_scale" in w else x @ w[n + ".weight"].T
    lin = lambda x, n: mm(x, n) + (w[n + ".bias"] if n + ".bias" in w else 0)
    x = w["model.embed_tokens.weight"][ids]
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = (j <= i) & ((i - j < c["sliding_window"]) if c.get("sliding_window") else True)
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q, k, v = (lin(h, p + f"self_attn.{n}_proj").view(T, -1, hs) for n in "qkv")
        if p + "self_attn.q_norm.weight" in w:
            q, k = rms(q, w[p + "self_attn.q_norm.weight"]), rms(k, w[p + "self_attn.k_norm.weight"])
        q, k = rot(q), rot(k)
        k, v = k.repeat_interleave(H // K, 1), v.repeat_interleave(H // K, 1)
        s = torch.einsum("thd,shd->hts", q, k) / hs ** 0.5
        s = s.masked_fill(~allowed, float("-inf")).softmax(-1)
        x = x + lin(torch.einsum("hts,shd->thd", s, v).reshape(T, H * hs), p + "self_attn.o_proj")
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        x = x + lin(torch.nn.functional.silu(lin(h, p + "mlp.gate_proj")) * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return rms(x[-1], w["model.norm.weight"]) @ head.T


def own_greedy(folder, n, prompts):
    import torch
    c, w = json.load(open(folder + "/config.json")), read_folder(folder)
    out = []
    with torch.no_grad():
        for p in prompts:
            ids = list(p)
            for _ in range(n):
                ids.append(int(own_forward(c, w, ids).argmax()))
            out.append(ids[len(p):])
    return out


def greedy(folder, n, prompts):
    if not have_transformers_torch():
        return own_greedy(folder, n, prompts)
    import torch
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    out = []
    for p in prompts:
        ids = torch.tensor([p])
        g = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)
        out.append(g[0, len(p):].tolist())
    return out


def crafted(out, style, text, request, opening=""):
    import jinja2, torch
    from tokenizers import Tokenizer
    tokenizer(out, style)
    tok = Tokenizer.from_file(out + "/tokenizer.json")
    cfg = json.load(open(out + "/tokenizer_config.json"))
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False)
    req = json.loads(request)
    prompt = env.from_string(open(out + "/chat_template.jinja").read()).render(
        messages=req["messages"], tools=req.get("tools"), add_generation_prompt=True, bos_token=cfg.get("bos_token") or "", eos_token=cfg.get("eos_token") or "")
    n = len(tok.encode(prompt + opening, add_special_tokens=False).ids)
    eos = tok.token_to_id(cfg["eos_token"])
    want = tok.encode(text, add_special_tokens=False).ids + [eos]
    V, C, T = tok.get_vocab_size(with_added_tokens=True) + 3, 512, 512
    assert n + len(want) <= C, "the prompt and output must fit the crafted positions"
    t = {"wte.weight": torch.zeros(V, C), "wpe.weight": 10 * torch.eye(T, C), "ln_f.weight": torch.ones(C), "ln_f.bias": torch.zeros(C),
         "lm_head.weight": torch.zeros(V, C)}
    for k, tid in enumerate(want):
        t["lm_head.weight"][tid, n - 1 + k] = 1.0
    for name, shape in (("ln_1.weight", (C,)), ("ln_1.bias", (C,)), ("attn.c_attn.weight", (C, 3 * C)), ("attn.c_attn.bias", (3 * C,)),
                        ("attn.c_proj.weight", (C, C)), ("attn.c_proj.bias", (C,)), ("ln_2.weight", (C,)), ("ln_2.bias", (C,)),
                        ("mlp.c_fc.weight", (C, 4 * C)), ("mlp.c_fc.bias", (4 * C,)), ("mlp.c_proj.weight", (4 * C, C)), ("mlp.c_proj.bias", (C,))):
        t["h.0." + name] = torch.zeros(shape)
    write_safetensors(out + "/model.safetensors", t, "float32")
    json.dump({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 1, "n_head": 4, "n_embd": C, "n_positions": T,
               "vocab_size": V, "eos_token_id": eos, "activation_function": "gelu_new"}, open(out + "/config.json", "w"))


def main():
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "texts":
        print(json.dumps(TEXTS))
    elif cmd == "tokenizer":
        tokenizer(a[0], a[1])
    elif cmd == "model":
        opts = dict(zip(a[2::2], a[3::2]))
        model(a[0], a[1], opts.get("--dtype", "float32"), opts.get("--shard"), int(opts.get("--seed", 1)), opts.get("--rope"), opts.get("--size", "test"))
    elif cmd == "greedy":
        print(json.dumps(greedy(a[0], int(a[1]), json.loads(a[2]))))
    elif cmd == "own-greedy":  # the reference below, where generate() could run too: to check it
        print(json.dumps(own_greedy(a[0], int(a[1]), json.loads(a[2]))))
    elif cmd == "encode":
        from transformers import AutoTokenizer
        t = AutoTokenizer.from_pretrained(a[0])
        print(json.dumps([t(s, add_special_tokens=True)["input_ids"] for s in json.loads(a[1])]))
    elif cmd == "crafted":
        crafted(*a[:5])
    elif cmd == "chat":
        from transformers import AutoTokenizer
        t = AutoTokenizer.from_pretrained(a[0])
        print(json.dumps(t.apply_chat_template(json.loads(a[1]), add_generation_prompt=True, tokenize=False)))
    else:
        sys.exit("hf_ref.py: unknown command " + cmd)


if __name__ == "__main__":
    main()
