"""chat_test.py — /v1/chat/completions against the peers that define it: published chat templates
(ChatML, Zephyr, Llama 2, Mistral, Gemma, as their tokenizer_config.json files carry them, and two
written here with the constructs of Qwen3's and Llama 3's)
rendered by Jinja2 as transformers' apply_chat_template renders them (trim_blocks, lstrip_blocks,
raise_exception), and the same conversation through loom-serve: the same prompt tokens
(vLLM's POST /tokenize with messages), the same refusals, and a chat completion whose greedy
tokens equal /v1/completions on Jinja2's prompt; streams as chat.completion.chunk deltas.

usage: chat_test.py write REPO_DIR SOURCE_FOLDER   (model folders, one per template)
       chat_test.py check URL
"""
import datetime
import json
import os
import shutil
import sys
import urllib.error
import urllib.request

import jinja2
import jinja2.ext
import jinja2.sandbox

TEMPLATES = {
    "chatml": ("<|endoftext|>", "<|endoftext|>",
               "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
               "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
               "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
               "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"),
    "zephyr": ("<s>", "</s>",
               "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + eos_token }}\n"
               "{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n"
               "{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n"
               "{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}"),
    "llama2": ("<s>", "</s>",
               "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}"
               "{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
               "{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
               "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
               "{% if loop.index0 == 0 and system_message != false %}"
               "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
               "{% else %}{% set content = message['content'] %}{% endif %}"
               "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
               "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"),
    "mistral": ("<s>", "</s>",
                "{{- bos_token }}\n{%- for message in messages %}\n    {%- if message['role'] == 'user' %}\n"
                "        {{- '[INST] ' + message['content']|trim + ' [/INST]' }}\n    {%- elif message['role'] == 'assistant' %}\n"
                "        {{- ' ' + message['content']|trim + eos_token }}\n    {%- else %}\n"
                "        {{- raise_exception('Only user and assistant roles are supported!') }}\n    {%- endif %}\n{%- endfor %}\n"
                "{%- if tools is defined and tools is not none %}{{ 'tools' }}{% endif %}"
                "{{ '' if messages|length > 2 else ' (' ~ messages|length ~ ' messages)' }}"),
    "gemma": ("<bos>", "<eos>",
              "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
              "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
              "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
              "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
              "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
              "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"),
    # Written for this test in the style of the newer published templates (Qwen3's reasoning
    # turns, Llama 3's tool headers): namespace() and attribute sets, reversed slices, split and
    # strip with characters, `is false`, select/reject, map, join, items with two loop names,
    # tojson(indent=...), break and continue, strftime_now.
    "reasoning": ("", "<|im_end|>",
                  "{%- set ns = namespace(last_user=messages|length - 1, seen=0) %}\n"
                  "{%- for m in messages[::-1] %}\n"
                  "    {%- if m.role == 'user' and ns.seen == 0 %}\n"
                  "        {%- set ns.last_user = (messages|length - 1) - loop.index0 %}\n"
                  "        {%- set ns.seen = 1 %}\n"
                  "    {%- endif %}\n"
                  "{%- endfor %}\n"
                  "{%- for message in messages %}\n"
                  "    {%- if message.role == 'assistant' and '</think>' in message.content %}\n"
                  "        {%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}\n"
                  "        {%- set thought = message.content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].strip('\\n ') %}\n"
                  "    {%- else %}\n"
                  "        {%- set content = message.content %}\n"
                  "        {%- set thought = '' %}\n"
                  "    {%- endif %}\n"
                  "    {{- '<|im_start|>' + message.role + '\\n' }}\n"
                  "    {%- if loop.index0 > ns.last_user and thought %}\n"
                  "        {{- '<think>\\n' + thought + '\\n</think>\\n\\n' }}\n"
                  "    {%- endif %}\n"
                  "    {{- content + eos_token + '\\n' }}\n"
                  "{%- endfor %}\n"
                  "{%- if add_generation_prompt %}\n"
                  "    {{- '<|im_start|>assistant\\n' }}\n"
                  "    {%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}\n"
                  "{%- endif %}"),
    "tooling": ("<|begin_of_text|>", "<|eot_id|>",
                "{{- bos_token }}\n"
                "{%- if tools is not defined or tools is none %}\n"
                "    {%- set tools = [{'name': 'clock', 'parameters': {'zone': 'string', 'style': ['short', 'long']}}] %}\n"
                "{%- endif %}\n"
                "{%- set builtin = ['code_interpreter', 'search', 'clock'] %}\n"
                "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}\n"
                "{{- 'Tools: ' + builtin | reject('equalto', 'code_interpreter') | join(', ') + '\\n' }}\n"
                "{{- 'Year: ' + strftime_now('%Y') + '\\n' if strftime_now is defined else '' }}\n"
                "{%- for t in tools %}{{- t | tojson(indent=2) }}{% for k, v in t.parameters | items %} {{ k }}={{ v }}{% endfor %}{% endfor %}\n"
                "{{- '\\nUsers: ' ~ (messages | selectattr('role', 'equalto', 'user') | list | length) }}\n"
                "{{- ' Roles: ' + messages | map(attribute='role') | join(',') | title }}\n"
                "{{- eos_token }}\n"
                "{%- for message in messages %}\n"
                "    {%- if message.role == 'tool' %}{% continue %}{% endif %}\n"
                "    {%- if message.tool_calls %}{% for c in message.tool_calls %}{{ c.function.name }}({{ c.function.arguments | tojson }}){% endfor %}"
                "{% continue %}{% endif %}\n"
                "    {%- if loop.index0 >= 6 %}{% break %}{% endif %}\n"
                "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + eos_token }}\n"
                "{%- endfor %}\n"
                "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"),
    # Macros with defaults and keywords, one calling itself; this model's folder holds it as
    # chat_template.jinja (ending in a newline, which Jinja drops), as newer transformers save it.
    "macros": ("<s>", "</s>",
               "{%- macro turn(role, content, mark='### ', shout=false) -%}\n"
               "{{ mark }}{{ role | capitalize }}: {{ content | upper if shout else content | trim }}\n"
               "{% endmacro -%}\n"
               "{%- macro dots(n) -%}{{ '.' }}{% if n > 1 %}{{ dots(n - 1) }}{% endif %}{%- endmacro -%}\n"
               "{{ bos_token }}\n"
               "{%- for m in messages %}\n"
               "{{ turn(m.role, m.content, shout=(m.role == 'system')) }}\n"
               "{%- endfor %}\n"
               "{%- if add_generation_prompt %}{{ turn('assistant', '', mark='>>> ') }}{{ dots(messages|length) }}{% endif %}\n"),
}

CONVERSATIONS = [
    [{"role": "user", "content": "Hello there"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is free software?"},
     {"role": "assistant", "content": "  Software that respects freedom.\n"}, {"role": "user", "content": "And the GPL?"}],
    [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}],
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
    [{"role": "tool", "content": "42"}],
    [{"role": "user", "content": "Zürich, 23 °C?"}, {"role": "assistant", "content": "<think>\nCheck the units.\n</think>\n\nYes."},
     {"role": "tool", "content": "{}"}, {"role": "user", "content": "Thanks"},
     {"role": "assistant", "content": "<think> fine </think>Bye"}],
]


def jinja(source, messages, add_generation_prompt, bos, eos, **extra):
    # As transformers' apply_chat_template sets Jinja2 up: loop controls, its own tojson and
    # the raise_exception and strftime_now globals.
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[jinja2.ext.loopcontrols])

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    try:
        return env.from_string(source).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                              bos_token=bos, eos_token=eos, **extra), None
    except jinja2.exceptions.TemplateError as e:
        return None, str(e)


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def write(repo, source):
    for name, (bos, eos, template) in TEMPLATES.items():
        folder = os.path.join(repo, "chat-" + name, "1")
        os.makedirs(folder, exist_ok=True)
        for f in ("config.json", "model.safetensors", "vocab.json", "merges.txt"):
            shutil.copy(os.path.join(source, f), folder)
        config = {"bos_token": bos, "eos_token": {"content": eos}}
        if name == "macros":
            with open(os.path.join(folder, "chat_template.jinja"), "w") as f:
                f.write(template)
        else:
            config["chat_template"] = template
        with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
            json.dump(config, f)
    # A template that uses what loom-serve does not render: that model is refused at load, by name.
    folder = os.path.join(repo, "chat-include", "1")
    shutil.copytree(os.path.join(repo, "chat-chatml", "1"), folder)
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": "{% include 'other.jinja' %}{{ messages[0]['content'] }}"}, f)


def check(url):
    failures, count = [], 0

    def expect(ok, what):
        nonlocal count
        count += 1
        if not ok:
            failures.append(what)
            print("FAIL:", what)

    for name, (bos, eos, template) in TEMPLATES.items():
        model = "chat-" + name
        for k, messages in enumerate(CONVERSATIONS):
            for agp in (True, False):
                want, refused = jinja(template, messages, agp, bos, eos)
                st, body = post(url + "/tokenize", {"model": model, "messages": messages, "add_generation_prompt": agp})
                what = f"{name}, conversation {k}, add_generation_prompt {agp}"
                if refused is not None:
                    expect(st == 400 and refused in body, f"{what}: Jinja2 refused ({refused}); loom-serve answered {st} {body[:200]}")
                    continue
                st2, direct = post(url + "/tokenize", {"model": model, "prompt": want})
                expect(st == 200 and st2 == 200 and json.loads(body)["tokens"] == json.loads(direct)["tokens"],
                       f"{what}: the prompt differs from Jinja2's {want!r}: {body[:300]}")

    # What clients send beside role and content: tools (shown by the template), an assistant turn's
    # tool_calls, chat_template_kwargs (enable_thinking).
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object", "required": ["city"],
                                                                                   "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 0.5}}}}}]
    calls = [{"role": "user", "content": "Weather in Zürich?"},
             {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
                                                                  "function": {"name": "weather", "arguments": {"days": 2, "city": "Zürich"}}}]},
             {"role": "tool", "tool_call_id": "c1", "content": "sunny"}, {"role": "user", "content": "Thanks"}]
    for name, extra in [("tooling", {"tools": tools}), ("reasoning", {"chat_template_kwargs": {"enable_thinking": False}}),
                        ("tooling", {"tools": tools, "chat_template_kwargs": {"bos_token": "<B>"}})]:
        bos, eos, template = TEMPLATES[name]
        kwargs = dict(extra.get("chat_template_kwargs", {}))
        if "tools" in extra:
            kwargs["tools"] = extra["tools"]
        want, _ = jinja(template, calls, True, **{"bos": kwargs.pop("bos_token", bos), "eos": eos}, **kwargs)
        st, body = post(url + "/tokenize", {"model": "chat-" + name, "messages": calls, **extra})
        st2, direct = post(url + "/tokenize", {"model": "chat-" + name, "prompt": want})
        expect(st == 200 and st2 == 200 and json.loads(body)["tokens"] == json.loads(direct)["tokens"],
               f"{name} with {list(extra)}: the prompt differs from Jinja2's {want!r}: {body[:300]}")
    st, text = post(url + "/v1/chat/completions", {"model": "chat-tooling", "messages": calls, "tools": tools, "tool_choice": "auto"})
    # Tool calls are read in a format the model's tokens name (or --tool-call-parser): this BPE has none.
    expect(st == 400 and "has no tool-call format" in text, f"tool_choice auto: {st} {text[:200]}")

    with urllib.request.urlopen(urllib.request.Request(url + "/v2/repository/index", data=b"{}"), timeout=30) as r:
        index = {m["name"]: m for m in json.loads(r.read())}
    expect(index.get("chat-include", {}).get("state") == "UNAVAILABLE" and "uses {% include %}" in index["chat-include"].get("reason", ""),
           f"a template with an include: {index.get('chat-include')}")
    # A chat completion is the completion of the template's prompt: the same greedy tokens.
    messages = CONVERSATIONS[0]  # (this test's model holds 128 positions)
    prompt, _ = jinja(TEMPLATES["chatml"][2], messages, True, "<|endoftext|>", "<|endoftext|>")
    st, chat = post(url + "/v1/chat/completions", {"model": "chat-chatml", "messages": messages, "max_tokens": 12,
                                                   "temperature": 0, "ignore_eos": True, "logprobs": True, "top_logprobs": 2})
    st2, plain = post(url + "/v1/completions", {"model": "chat-chatml", "prompt": prompt, "max_tokens": 12, "temperature": 0,
                                                "ignore_eos": True})
    expect(st == 200 and st2 == 200, f"chat {st} {chat[:300]}; completion {st2} {plain[:300]}")
    if st == 200 and st2 == 200:
        c, p = json.loads(chat), json.loads(plain)
        choice = c["choices"][0]
        expect(c["object"] == "chat.completion" and choice["message"]["role"] == "assistant", f"chat answer shape: {c}")
        expect(choice["token_ids"] == p["choices"][0]["token_ids"] and choice["message"]["content"] == p["choices"][0]["text"],
               f"chat tokens {choice['token_ids']} differ from the completion's {p['choices'][0]['token_ids']}")
        lp = choice["logprobs"]["content"]
        expect(len(lp) == 12 and all(len(t["top_logprobs"]) == 2 and t["token"].startswith("token_id:") for t in lp),
               f"chat logprobs: {choice['logprobs']}")
        expect(c["usage"]["prompt_tokens"] == p["usage"]["prompt_tokens"], f"usage: {c['usage']} against {p['usage']}")
        # The same as a stream: chunks of deltas, the first with the role, ending [DONE].
        st, text = post(url + "/v1/chat/completions", {"model": "chat-chatml", "messages": messages, "max_tokens": 12,
                                                       "temperature": 0, "ignore_eos": True, "stream": True})
        events = [e[len("data: "):] for e in text.split("\n\n") if e.startswith("data: ")]
        chunks = [json.loads(e) for e in events[:-1]]
        expect(st == 200 and events[-1] == "[DONE]" and all(x["object"] == "chat.completion.chunk" for x in chunks),
               f"stream framing: {text[:300]}")
        deltas = [x["choices"][0]["delta"] for x in chunks if x["choices"]]
        expect(deltas and deltas[0].get("role") == "assistant" and all("role" not in d for d in deltas[1:]), f"stream roles: {deltas}")
        expect("".join(d.get("content", "") for d in deltas) == choice["message"]["content"], "the stream's content differs")
    # OpenAI's own Python client, where this interpreter has it: the answer and the stream parse.
    try:
        import openai
    except ImportError:
        openai = None
    if openai is not None:
        client = openai.OpenAI(base_url=url + "/v1", api_key="none")
        r = client.chat.completions.create(model="chat-zephyr", messages=messages, max_tokens=6, temperature=0)
        expect(r.choices[0].message.role == "assistant" and (r.usage.completion_tokens == 6 or r.choices[0].finish_reason == "stop"),
               f"OpenAI's client: {r}")
        pieces = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
            model="chat-zephyr", messages=messages, max_tokens=6, temperature=0, stream=True) if c.choices]
        expect("".join(pieces) == r.choices[0].message.content, f"OpenAI's client, streamed: {pieces} against {r.choices[0].message.content!r}")
        try:
            client.chat.completions.create(model="chat-gemma", messages=CONVERSATIONS[3], max_tokens=2)
            expect(False, "OpenAI's client: the template's refusal was answered")
        except openai.BadRequestError as e:
            expect("Conversation roles must alternate" in str(e), f"OpenAI's client, refused: {e}")
    # Bad requests: each a 400 with OpenAI's error body.
    for what, body, words in [
        ("no messages", {"model": "chat-chatml"}, "messages must be a non-empty list"),
        ("a message without a role", {"model": "chat-chatml", "messages": [{"content": "x"}]}, "must be an object with a role"),
        ("an image part", {"model": "chat-chatml", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
         "only parts"),
        ("logprobs not a bool", {"model": "chat-chatml", "messages": CONVERSATIONS[0], "logprobs": 3}, "logprobs must be true or false"),
        ("the template refuses", {"model": "chat-llama2", "messages": CONVERSATIONS[3]}, "Conversation roles must alternate"),
        ("chat_template_kwargs not an object", {"model": "chat-chatml", "messages": CONVERSATIONS[0], "chat_template_kwargs": [1]},
         "chat_template_kwargs must be an object"),
        ("tools not a list", {"model": "chat-chatml", "messages": CONVERSATIONS[0], "tools": "get_weather"}, "tools must be"),
    ]:
        st, text = post(url + "/v1/chat/completions", body)
        expect(st == 400 and words in text and '"error"' in text, f"{what}: {st} {text[:200]}")
    print(f"chat_test: {count - len(failures)} of {count} checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2], sys.argv[3])
        sys.exit(0)
    sys.exit(check(sys.argv[2]))
