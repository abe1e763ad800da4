#!/usr/bin/env python3
"""llm_client.py — an OpenAI-completions client for the LLM serving tests (urllib, threads, and a
server-sent-events reader that takes the stream as the SSE spec frames it: `data:` lines, events
ended by a blank line, `[DONE]` last).

  greedy URL MODEL N PROMPTS_JSON EXPECTED_JSON [--stream]
      every prompt sent at once (one thread each), greedy, N tokens, ignore_eos; each answer's
      token ids must equal the expected lists (PyTorch's); prints the agreement.
  tokenize URL MODEL VOCAB_JSON MERGES_TXT
      (run with Hugging Face's `tokenizers` importable) texts of every kind — contractions, digits,
      whitespace runs, accents, CJK, emoji, punctuation — through loom-serve's /tokenize and
      through tokenizers' ByteLevelBPETokenizer on the same files: the ids must be equal, and
      /detokenize must give each text back.
  openai URL MODEL EXPECTED_TEXT PROMPT
      (run with the `openai` package importable) OpenAI's own Python client against loom-serve:
      models.list, a greedy completion plain and streamed (the stream parsed by the client's
      own SSE reader) equal to EXPECTED_TEXT, n choices with usage, and a bad request raised
      as the client's BadRequestError with the server's message.
  flood URL MODEL PID
      1,000 streamed completions from clients that never read (small receive buffers, many
      logprobs per event): another client must still be answered at once, the server (PID) grow
      less than 300 MiB, and once the clients close, no sequence of theirs run on.
"""
import json, sys, threading, urllib.request


def post(url, body, stream=False):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=120)


def sse_events(resp):
    """The data of each server-sent event, in order."""
    data = []
    for raw in resp:
        line = raw.decode("utf-8").rstrip("\r\n")
        if line == "":
            if data:
                yield "\n".join(data)
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
    if data:
        yield "\n".join(data)


def complete(url, model, prompt, n, stream):
    body = {"model": model, "prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True, "stream": stream}
    with post(url + "/v1/completions", body) as r:
        if not stream:
            a = json.load(r)
            c = a["choices"][0]
            assert a["object"] == "text_completion" and a["usage"]["completion_tokens"] == len(c["token_ids"]), a
            return c["token_ids"], c["finish_reason"]
        ids, finish, events = [], None, list(sse_events(r))
        assert events and events[-1] == "[DONE]", events[-3:]
        for e in events[:-1]:
            chunk = json.loads(e)
            assert "error" not in chunk, chunk
            for c in chunk["choices"]:
                ids += c["token_ids"]
                finish = c["finish_reason"] or finish
        return ids, finish


def greedy(url, model, n, prompts, expected, stream):
    got = [None] * len(prompts)
    def one(i):
        try:
            got[i] = complete(url, model, prompts[i], n, stream)
        except Exception as e:  # reported below
            got[i] = (repr(e), None)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    same = sum(1 for (ids, _), want in zip(got, expected) if ids == want)
    print(f"llm_client: {same}/{len(prompts)} sequences token-for-token equal to PyTorch's greedy loop"
          f" ({'stream' if stream else 'plain'}, {n} tokens each)")
    for (ids, fin), want in zip(got, expected):
        if ids != want:
            print(f"  got {ids}\n  want {want}")
        elif fin != "length":
            print(f"  finish_reason {fin}, not length")
            return 1
    return 0 if same == len(prompts) else 1


TEXTS = ["Hello world", "  leading spaces", "trailing   ", "a\n\nb", "tabs\tand\r\nCRLF", "x  y   z",
         "it's we're they've I'm you'll he'd 'quoted' IT'S", "numbers 123 4567890 3.14 ½ ٣ ⅷ", "café naïve déjà vu € £",
         "日本語のテキスト、句読点。", "emoji 😀🎉 ok", "mixed123abc_def", "punct!!! ??? ... --- ((x))", "  \n  ", "x" * 300,
         "This License applies to any program or other work which contains a notice placed by the copyright holder",
         "Ελληνικά и русский текст", "\u00a0non-breaking\u2003em space", "tab\t\tend\t", "a's's's", "'s"]


def tokenize(url, model, vocab, merges):
    from tokenizers import ByteLevelBPETokenizer
    hf = ByteLevelBPETokenizer(vocab, merges)
    bad = 0
    for t in TEXTS:
        with post(url + "/tokenize", {"model": model, "prompt": t}) as r:
            got = json.load(r)["tokens"]
        want = hf.encode(t).ids
        with post(url + "/detokenize", {"model": model, "tokens": got}) as r:
            back = json.load(r)["prompt"]
        if got != want or back != t:
            bad += 1
            print(f"  {t[:40]!r}: loom {got[:12]} tokenizers {want[:12]} back {back[:40]!r}")
    print(f"llm_client: {len(TEXTS) - bad}/{len(TEXTS)} texts tokenized as Hugging Face's tokenizers does and given back whole")
    return 1 if bad else 0


def hf_tokenize(url, model, folder):
    """tokenizer.json through `tokenizers` against loom-serve: ids with the post-processor's
    specials (a completion's prompt), and /detokenize equal to tokenizers' decode."""
    import os
    from tokenizers import Tokenizer
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from hf_ref import TEXTS
    hf = Tokenizer.from_file(folder + "/tokenizer.json")
    bad = 0
    for t in TEXTS:
        with post(url + "/tokenize", {"model": model, "prompt": t}) as r:
            got = json.load(r)["tokens"]
        want = hf.encode(t, add_special_tokens=True).ids
        with post(url + "/detokenize", {"model": model, "tokens": want}) as r:
            back = json.load(r)["prompt"]
        if got != want or back != hf.decode(want, skip_special_tokens=True):
            bad += 1
            print(f"  {t[:40]!r}: loom {got[:16]} tokenizers {want[:16]} back {back[:40]!r} want {hf.decode(want, skip_special_tokens=True)[:40]!r}")
    print(f"llm_client: {model}: {len(TEXTS) - bad}/{len(TEXTS)} texts tokenized as Hugging Face's tokenizers does and decoded as it decodes")
    return 1 if bad else 0


def hf_chat(url, model, folder):
    """Chat prompts: loom-serve's /tokenize of messages against transformers' apply_chat_template
    (where transformers is importable; else the folder's template rendered by Jinja2 as it does),
    encoded by `tokenizers` without specials."""
    import jinja2
    from tokenizers import Tokenizer
    hf = Tokenizer.from_file(folder + "/tokenizer.json")
    cfg = json.load(open(folder + "/tokenizer_config.json"))
    try:
        source = open(folder + "/chat_template.jinja").read()
    except FileNotFoundError:
        source = cfg["chat_template"]
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False)
    tmpl = env.from_string(source)
    convs = [[{"role": "user", "content": "Hello there, what is ½ of ②?"}],
             [{"role": "system", "content": "Answer in Hindi."}, {"role": "user", "content": "नमस्ते! How are you?"},
              {"role": "assistant", "content": "मैं ठीक हूँ।"}, {"role": "user", "content": "And in Thai? สวัสดี"}]]
    try:
        from transformers import AutoTokenizer
        auto = AutoTokenizer.from_pretrained(folder)
        render = lambda m: auto.apply_chat_template(m, add_generation_prompt=True, tokenize=False)
    except ImportError:
        render = lambda m: tmpl.render(messages=m, add_generation_prompt=True, bos_token=cfg.get("bos_token") or "", eos_token=cfg.get("eos_token") or "")
    bad = 0
    for m in convs:
        text = render(m)
        want = hf.encode(text, add_special_tokens=False).ids
        with post(url + "/tokenize", {"model": model, "messages": m}) as r:
            got = json.load(r)["tokens"]
        if got != want:
            bad += 1
            print(f"  chat {m[0]['content'][:20]!r}: loom {got[:20]} want {want[:20]}")
    print(f"llm_client: {model}: {len(convs) - bad}/{len(convs)} chat prompts equal to the template's rendering, tokenized")
    return 1 if bad else 0


def tool_calls(url, model, request, content, name, arguments, choice):
    """OpenAI's Python client asks MODEL (a model crafted to answer REQUEST with a call) with
    tool_choice CHOICE (auto, required, or a function's name): the call comes back as tool_calls,
    whole and streamed; with NAME "-", the output is no call and comes back as CONTENT."""
    import openai
    req = json.loads(request)
    tc = choice if choice in ("auto", "required", "none") else {"type": "function", "function": {"name": choice}}
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused")
    kw = dict(model=model, messages=req["messages"], tools=req["tools"], tool_choice=tc, max_tokens=80, temperature=0)
    bad = []
    r = client.chat.completions.create(**kw)
    m = r.choices[0].message
    if name == "-":
        if m.tool_calls or m.content != content or r.choices[0].finish_reason != "stop":
            bad.append(f"not a call: {m} {r.choices[0].finish_reason}")
    elif not m.tool_calls or m.tool_calls[0].function.name != name or json.loads(m.tool_calls[0].function.arguments) != json.loads(arguments) \
            or (m.content or "") != content or r.choices[0].finish_reason != "tool_calls" or not m.tool_calls[0].id:
        bad.append(f"whole: {m} {r.choices[0].finish_reason}")
    text, calls, finish = "", {}, None
    for chunk in client.chat.completions.create(stream=True, **kw):
        for c in chunk.choices:
            text += c.delta.content or ""
            for d in c.delta.tool_calls or []:
                e = calls.setdefault(d.index, {"name": "", "arguments": "", "id": None})
                e["id"] = d.id or e["id"]
                e["name"] += (d.function.name or "") if d.function else ""
                e["arguments"] += (d.function.arguments or "") if d.function else ""
            finish = c.finish_reason or finish
    if name == "-":
        if calls or text != content or finish != "stop":
            bad.append(f"streamed, not a call: {text!r} {calls} {finish}")
    elif not calls or calls[0]["name"] != name or json.loads(calls[0]["arguments"]) != json.loads(arguments) or text != content or finish != "tool_calls":
        bad.append(f"streamed: {text!r} {calls} {finish}")
    for b in bad:
        print("  " + b)
    print(f"llm_client: {model}, tool_choice {choice}: " + ("the call came back whole and streamed" if name != "-" else "no call: text") +
          (" as OpenAI's client reads it" if not bad else " WRONG"))
    return 1 if bad else 0


def openai_client(url, model, expected, prompt):
    import openai
    c = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    ids = [m.id for m in c.models.list().data]
    assert model in ids, ids
    args = dict(model=model, prompt=prompt, max_tokens=12, temperature=0, extra_body={"ignore_eos": True})
    plain = c.completions.create(**args)
    streamed = "".join(ch.choices[0].text for ch in c.completions.create(stream=True, **args) if ch.choices)
    assert plain.choices[0].text == expected and streamed == expected, (plain.choices[0].text, streamed, expected)
    assert plain.usage.completion_tokens == 12 and plain.choices[0].finish_reason == "length", plain
    three = c.completions.create(model=model, prompt=prompt, max_tokens=4, n=3, temperature=1.0, seed=3)
    assert len(three.choices) == 3 and three.usage.completion_tokens == 12, three
    try:
        c.completions.create(model=model, prompt=prompt, max_tokens=4, top_p=7)
        raise AssertionError("top_p 7 was accepted")
    except openai.BadRequestError as e:
        assert "top_p must be" in str(e), e
    print(f"llm_client: OpenAI's client {openai.__version__}: models.list, completions plain and streamed "
          f"({expected!r}), n=3 and a BadRequestError as the server said")
    return 0


def flood(url, model, pid):
    import socket, time
    host, port = url[7:].split(":")
    def rss():
        return int(open(f"/proc/{pid}/status").read().split("VmRSS:")[1].split()[0]) // 1024
    def sequences():
        m = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
        return sum(float(l.split()[-1]) for l in m.split("\n")
                   if l.startswith(("loom_llm_running_sequences{", "loom_llm_waiting_sequences{")))
    r0 = rss()
    body = json.dumps({"model": model, "prompt": [1, 2, 3], "max_tokens": 120, "stream": True, "ignore_eos": True, "logprobs": 20})
    req = f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode()
    socks = []
    for _ in range(1000):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(5)
        s.connect((host, int(port)))
        s.sendall(req)
        socks.append(s)
    time.sleep(2)
    t0 = time.time()
    with post(url + "/v1/completions", {"model": model, "prompt": [1], "max_tokens": 5}) as r:
        a = json.load(r)
    took, grown = time.time() - t0, rss() - r0
    print(f"llm_client: 1000 streams that never read; another client answered in {took:.2f} s; the server grew {grown} MiB")
    if len(a["choices"][0]["token_ids"]) != 5 or took > 10 or grown > 300:
        return 1
    for s in socks:
        s.close()
    for _ in range(300):
        if sequences() == 0:
            return 0
        time.sleep(0.1)
    print("llm_client: sequences of closed connections still run")
    return 1


if __name__ == "__main__":
    if sys.argv[1] == "openai":
        sys.exit(openai_client(*sys.argv[2:6]))
    if sys.argv[1] == "flood":
        sys.exit(flood(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    if sys.argv[1] == "tools":
        sys.exit(tool_calls(*sys.argv[2:9]))
    if sys.argv[1] == "hf-tokenize":
        sys.exit(hf_tokenize(*sys.argv[2:5]))
    if sys.argv[1] == "hf-chat":
        sys.exit(hf_chat(*sys.argv[2:5]))
    if sys.argv[1] == "tokenize":
        sys.exit(tokenize(*sys.argv[2:6]))
    if sys.argv[1] == "greedy":
        sys.exit(greedy(sys.argv[2], sys.argv[3], int(sys.argv[4]), json.loads(sys.argv[5]), json.loads(sys.argv[6]),
                        "--stream" in sys.argv[7:]))
    sys.exit(f"unknown command {sys.argv[1]}")
