"""Qwen3.5 chat format for training samples, rendered and tokenized the way
wick does it (src/chat/chat_qwen.c; spec tokenizer-and-templates.md 7):

  [<|im_start|>system\\n# Tools ... <|im_end|>\\n]
  <|im_start|>user\\nCONTENT<|im_end|>\\n
  <|im_start|>assistant\\n<think>\\n                    generation prompt (thinking on)
  <|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n     generation prompt (enable_thinking=false)

Template markers become special-token ids; the text between two special
tokens is encoded as one piece, as wick tokenizes a rendered prompt. What the
model must generate (the completion) is tokenized on its own, since at
inference it is produced token by token after the prompt.

CHAT_TEMPLATE is the Jinja text written into tokenizer_config.json (and so
into the GGUF): it renders the same rules, and carries the markers by which
wick recognises the qwen35 template family."""
import json

# Byte for byte QWEN35_TOOLS_HEAD / QWEN35_TOOLS_TAIL of src/chat/chat_qwen.c: the model must
# learn exactly what wick sends it.
TOOLS_HEAD = "# Tools\n\nYou have access to the following functions:\n\n<tools>"
TOOLS_TAIL = (
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
    "</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\n"
    "that can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n"
    "- Function calls MUST follow the specified format: an inner <function=...></function> block "
    "must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE the "
    "function call, but NOT after\n"
    "- If there is no function call available, answer the question like normal with your current "
    "knowledge and do not tell the user about function calls\n</IMPORTANT>")

SPECIALS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
            "</tool_call>", "<tool_response>", "</tool_response>")


class Parts:
    """A token stream under construction: special markers and text runs."""

    def __init__(self):
        self.items = []                           # ("s", marker) or ("t", text)

    def sp(self, text):
        """Template text: markers in it become special tokens."""
        i = 0
        while i < len(text):
            hit = None
            for m in SPECIALS:
                if text.startswith(m, i):
                    hit = m
                    break
            if hit:
                self.items.append(("s", hit))
                i += len(hit)
            else:
                j = i + 1
                while j < len(text) and not any(text.startswith(m, j) for m in SPECIALS):
                    j += 1
                self.text(text[i:j])
                i = j
        return self

    def text(self, text):
        """Content: never parsed for markers; joins the preceding text run."""
        if not text:
            return self
        if self.items and self.items[-1][0] == "t":
            self.items[-1] = ("t", self.items[-1][1] + text)
        else:
            self.items.append(("t", text))
        return self

    def ids(self, tok):
        out = []
        for kind, v in self.items:
            out.extend([tok.id_of(v)] if kind == "s" else tok.encode(v))
        return out

    def plain(self):
        return "".join(v for _, v in self.items)


def tojson(x):
    """Python json.dumps as Hugging Face's tojson filter writes it."""
    return json.dumps(x, ensure_ascii=False)


def tool_call_text(p, name, args, first, content_nonempty):
    if not first:
        p.sp("\n")
    elif content_nonempty:
        p.sp("\n\n")
    p.sp("<tool_call>\n<function=").text(name).sp(">\n")
    for k, v in args.items():
        p.sp("<parameter=").text(k).sp(">\n")
        p.text(tojson(v) if isinstance(v, (dict, list)) else str(v))
        p.sp("\n</parameter>\n")
    p.sp("</function>\n</tool_call>")


def render_prompt(messages, tools=None, thinking=True):
    """Prompt Parts for a conversation ending with the generation prompt.
    messages: dicts with role system|user|assistant|tool, content, and for
    assistants optional tool_calls [{"name", "arguments": dict}]. History
    assistant turns render without a think block (they come before the last
    user query, or carry no reasoning)."""
    p = Parts()
    msgs = list(messages)
    sys_msg = msgs.pop(0)["content"].strip() if msgs and msgs[0]["role"] == "system" else None
    if tools:
        p.sp("<|im_start|>system\n" + TOOLS_HEAD)
        for t in tools:
            p.sp("\n").text(tojson(t))
        p.sp(TOOLS_TAIL)
        if sys_msg:
            p.sp("\n\n").text(sys_msg)
        p.sp("<|im_end|>\n")
    elif sys_msg is not None:
        p.sp("<|im_start|>system\n").text(sys_msg).sp("<|im_end|>\n")
    for i, m in enumerate(msgs):
        c = m.get("content", "").strip()
        if m["role"] == "user":
            p.sp("<|im_start|>user\n").text(c).sp("<|im_end|>\n")
        elif m["role"] == "assistant":
            p.sp("<|im_start|>assistant\n").text(c)
            for k, call in enumerate(m.get("tool_calls", [])):
                tool_call_text(p, call["name"], call["arguments"], k == 0, bool(c))
            p.sp("<|im_end|>\n")
        elif m["role"] == "tool":
            if i == 0 or msgs[i - 1]["role"] != "tool":
                p.sp("<|im_start|>user")
            p.sp("\n<tool_response>\n").text(c).sp("\n</tool_response>")
            if i == len(msgs) - 1 or msgs[i + 1]["role"] != "tool":
                p.sp("<|im_end|>\n")
        else:
            raise ValueError(f"role {m['role']}")
    p.sp("<|im_start|>assistant\n<think>\n" if thinking else "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    return p


def render_completion(content, tool_calls=(), thinking=True):
    """What the model generates after the prompt, ending with <|im_end|>."""
    p = Parts()
    if thinking:
        p.sp("\n</think>\n\n")
    c = content.strip()
    p.text(c)
    for k, call in enumerate(tool_calls):
        tool_call_text(p, call["name"], call["arguments"], k == 0, bool(c))
    p.sp("<|im_end|>")
    return p


def sample_ids(tok, messages, answer, tools=None, tool_calls=(), thinking=True):
    """(ids, target mask): prompt tokens (mask 0) then completion tokens (mask 1)."""
    prompt = render_prompt(messages, tools, thinking).ids(tok)
    comp = render_completion(answer, tool_calls, thinking).ids(tok)
    return prompt + comp, [0] * len(prompt) + [1] * len(comp)


# Jinja for Hugging Face apply_chat_template and for the GGUF's
# tokenizer.chat_template: the rules above (and wick's), tools first in the
# system turn, history turns without reasoning, generation prompt opening
# <think> unless enable_thinking is false.
CHAT_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}{%- set system_message = messages[0].content | trim %}"
    "{%- set loop_messages = messages[1:] %}{%- else %}{%- set system_message = none %}"
    "{%- set loop_messages = messages %}{%- endif %}"
    "{%- if tools %}{{- '<|im_start|>system\\n" + TOOLS_HEAD.replace("\n", "\\n") + "' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '" + TOOLS_TAIL.replace("\n", "\\n") + "' }}"
    "{%- if system_message %}{{- '\\n\\n' + system_message }}{%- endif %}{{- '<|im_end|>\\n' }}"
    "{%- elif system_message is not none %}{{- '<|im_start|>system\\n' + system_message + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in loop_messages %}"
    "{%- set content = message.content | default('', true) | trim %}"
    "{%- if message.role == 'user' %}{{- '<|im_start|>user\\n' + content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{%- if '</think>' in content %}{%- set content = content.split('</think>')[-1] | trim %}{%- endif %}"
    "{{- '<|im_start|>assistant\\n' + content }}"
    "{%- for tc in message.tool_calls | default([], true) %}"
    "{%- set tc = tc.function if tc.function is defined else tc %}"
    "{%- if loop.first %}{%- if content %}{{- '\\n\\n' }}{%- endif %}{%- else %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n<function=' + tc.name + '>\\n' }}"
    "{%- for k, v in tc.arguments.items() %}{{- '<parameter=' + k + '>\\n' }}"
    "{%- if v is mapping or (v is iterable and v is not string) %}{{- v | tojson }}{%- else %}{{- v | string }}"
    "{%- endif %}{{- '\\n</parameter>\\n' }}{%- endfor %}{{- '</function>\\n</tool_call>' }}"
    "{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or loop.previtem.role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' }}"
    "{%- if loop.last or loop.nextitem.role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else %}{{- '<think>\\n' }}{%- endif %}{%- endif %}"
)
