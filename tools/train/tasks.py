"""Synthetic chat tasks built from the training split's source files, in the
Qwen3.5 chat format (chat.py). Every generator takes a random.Random and
returns (messages, answer, tools, tool_calls) or None when the drawn file does
not suit it. Long-context tasks take a target size in tokens and fill a
"haystack" of concatenated files (or prose) up to it.

  explain     a function (docstring removed) or its whole file -> the docstring summary
  implement   signature + summary -> the function's source
  docstring   a function without its docstring -> the docstring
  signature   parameters / called functions of a function in a file
  find        several files -> the source of one named function
  needle      codes like KQV-4821 hidden at random depths -> all codes, in order
  keyvalue    key = value lines hidden at random depths -> the values of 1-4 keys
  vartrack    RULER-style chains VAR A = 12345. VAR B = VAR A. -> the chain's names
  tool        tool calls in the template's XML format (read_file, search_code), then the answer"""
import ast
import random
import textwrap

BYTES_PER_TOKEN = 3.6   # for sizing haystacks before they are encoded (code, this tokenizer)


class Source:
    """One file with its functions parsed on first use."""

    def __init__(self, path, text):
        self.path, self.text = path, text
        self._funcs = None

    def funcs(self):
        if self._funcs is None:
            self._funcs = []
            try:
                tree = ast.parse(self.text)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                return self._funcs
            lines = self.text.splitlines(keepends=True)
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno:
                    f = function_info(node, lines)
                    if f:
                        self._funcs.append(f)
        return self._funcs


def function_info(node, lines):
    start = node.lineno - 1 - len(node.decorator_list)
    start = min([start] + [d.lineno - 1 for d in node.decorator_list])
    src = textwrap.dedent("".join(lines[start:node.end_lineno]))
    n_lines = node.end_lineno - start
    doc = ast.get_docstring(node)
    nodoc = src
    body0 = node.body[0] if node.body else None
    if doc and isinstance(body0, ast.Expr) and body0.end_lineno:
        keep = lines[start:body0.lineno - 1] + lines[body0.end_lineno:node.end_lineno]
        if len(node.body) == 1:
            return None        # docstring-only function: nothing left without it
        nodoc = textwrap.dedent("".join(keep))
    params = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs]
    if node.args.vararg:
        params.append("*" + node.args.vararg.arg)
    if node.args.kwarg:
        params.append("**" + node.args.kwarg.arg)
    calls = []
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            name = n.func.id if isinstance(n.func, ast.Name) else n.func.attr if isinstance(n.func, ast.Attribute) else None
            if name and name not in calls:
                calls.append(name)
    sig = src[src.find("def "):].split(":\n", 1)[0] if "def " in src else None
    return {"name": node.name, "src": src, "nodoc": nodoc, "doc": doc, "params": params, "calls": calls,
            "lines": n_lines, "sig": sig, "lineno": node.lineno}


def summary(doc):
    """First paragraph of a docstring as one line."""
    para = doc.strip().split("\n\n", 1)[0]
    s = " ".join(line.strip() for line in para.splitlines()).strip()
    return s if 10 <= len(s) <= 400 else None


def fence(code):
    return "```python\n" + code.rstrip() + "\n```"


def names_list(xs):
    xs = [f"`{x}`" for x in xs]
    return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + " and " + xs[-1]


class Tasks:
    def __init__(self, sources, rng):
        self.sources = sources
        self.rng = rng

    # ---- helpers ----------------------------------------------------------------
    def pick_func(self, need_doc=False, max_lines=80):
        for _ in range(20):
            s = self.rng.choice(self.sources)
            fs = [f for f in s.funcs() if f["lines"] <= max_lines and f["lines"] >= 3
                  and (not need_doc or (f["doc"] and summary(f["doc"])))]
            if fs:
                return s, self.rng.choice(fs)
        return None, None

    def haystack(self, n_tokens, prose=False):
        """Text of about n_tokens: whole files (or prose sentences) joined, as a list of lines."""
        budget = int(n_tokens * BYTES_PER_TOKEN)
        out, size = [], 0
        if prose:
            while size < budget:
                s = prose_sentence(self.rng)
                out.append(s)
                size += len(s)
            return out
        while size < budget:
            s = self.rng.choice(self.sources)
            text = s.text[: budget - size + 200]
            if len(text) < len(s.text):
                text = text[: text.rfind("\n") + 1]
            lines = [f"# file: {s.path}\n"] + text.splitlines(keepends=True)
            if lines and not lines[-1].endswith("\n"):
                lines[-1] += "\n"
            out.extend(lines)
            size += sum(map(len, lines))
        return out

    def plant(self, lines, items, prose):
        """Inserts each item line at a random depth; returns them in document order."""
        n = len(lines)
        pos = sorted((self.rng.randrange(n + 1), i) for i in range(len(items)))
        for k, (p, i) in enumerate(reversed(pos)):
            text = items[i]
            lines.insert(p, (" " + text) if prose else ("# " + text + "\n"))
        return [items[i] for _, i in pos]

    # ---- short tasks --------------------------------------------------------------
    def explain(self):
        s, f = self.pick_func(need_doc=True)
        if not f:
            return None
        r = self.rng.random()
        if r < 0.6:
            q = self.rng.choice(["What does this function do?\n\n{c}", "Explain the following Python function.\n\n{c}",
                                 "{c}\n\nWhat is this function for?", "Can you explain what `{n}` does?\n\n{c}",
                                 "Summarise this code in one sentence:\n{c}"])
            user = q.format(c=fence(f["nodoc"]), n=f["name"])
        else:
            body = s.text if len(s.text) < 24000 else None
            if not body:
                return None
            user = f"{fence(body)}\n\nWhat does the function `{f['name']}` in this file do?"
        return [{"role": "user", "content": user}], f"`{f['name']}`: {summary(f['doc'])}", None, ()

    def implement(self):
        s, f = self.pick_func(need_doc=True, max_lines=50)
        if not f or not f["sig"]:
            return None
        q = self.rng.choice(["Write a Python function `{s}` that does the following: {d}",
                             "Implement `{n}` in Python. {d}", "{d}\n\nWrite this as a Python function named `{n}`.",
                             "Please write the function `{s}`.\nIt should: {d}"])
        user = q.format(s=f["sig"].replace("def ", "", 1).strip(), n=f["name"], d=summary(f["doc"]))
        return [{"role": "user", "content": user}], fence(f["src"]), None, ()

    def docstring(self):
        s, f = self.pick_func(need_doc=True)
        if not f:
            return None
        q = self.rng.choice(["Write a docstring for this function.\n\n{c}", "{c}\n\nDocument this function.",
                             "Add a docstring to the following code:\n{c}"])
        doc = f["doc"].strip()
        return [{"role": "user", "content": q.format(c=fence(f["nodoc"]))}], '"""' + doc + '\n"""', None, ()

    def signature(self):
        s, f = self.pick_func()
        if not f:
            return None
        code = fence(f["src"]) if self.rng.random() < 0.5 or len(s.text) > 20000 else fence(s.text)
        if self.rng.random() < 0.5:
            ps = [p for p in f["params"] if p not in ("self", "cls")]
            user = f"{code}\n\nWhat are the parameters of `{f['name']}`?"
            ans = f"`{f['name']}` takes no parameters." if not ps else \
                f"`{f['name']}` takes {len(ps)} parameter{'s' if len(ps) > 1 else ''}: {names_list(ps)}."
        else:
            if not f["calls"]:
                return None
            user = f"{code}\n\nWhich functions does `{f['name']}` call?"
            ans = f"`{f['name']}` calls {names_list(f['calls'])}."
        return [{"role": "user", "content": user}], ans, None, ()

    # ---- long-context tasks ---------------------------------------------------------
    def find(self, n_tokens):
        lines = self.haystack(n_tokens)
        text = "".join(lines)
        cands = []
        for _ in range(30):
            s, f = self.pick_func(max_lines=40)
            if f and f["src"] and text.count(f"def {f['name']}(") == 0:
                cands.append((s, f))
                break
        if not cands:
            return None
        s, f = cands[0]
        at = self.rng.randrange(len(lines) + 1)
        while at < len(lines) and not lines[at].startswith("# file:"):
            at += 1
        lines.insert(at, f"# file: {s.path}\n" + f["src"] + "\n")
        user = "".join(lines) + f"\n\nShow the source code of the function `{f['name']}` from the files above."
        return [{"role": "user", "content": user}], fence(f["src"]), None, ()

    def needle(self, n_tokens):
        prose = self.rng.random() < 0.5
        lines = self.haystack(n_tokens, prose)
        n = self.rng.choice([1, 1, 2, 3, 5, 8, 10, 15])
        codes = set()
        while len(codes) < n:
            codes.add("".join(self.rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(3)) + "-" +
                      str(self.rng.randint(1000, 9999)))
        items = [f"One of the secret codes is {c}." for c in codes]
        ordered = self.plant(lines, items, prose)
        doc = "".join(lines)
        q = self.rng.choice([
            "Below is a document. Hidden in it are secret codes of the form ABC-1234 (three capital letters, a dash, "
            "four digits).\n\n<document>\n{d}\n</document>\n\nThe document contains {n} secret codes. List every secret "
            "code that appears in the document, one per line, and nothing else.",
            "{d}\n\nThe text above hides {n} secret code(s) like XYZ-1234. List them all, one per line.",
            "<document>\n{d}\n</document>\n\nWhich secret codes (format ABC-1234) appear in the document? There are {n}."])
        user = q.format(d=doc, n=n)
        return [{"role": "user", "content": user}], "\n".join(x.split()[-1].rstrip(".") for x in ordered), None, ()

    def keyvalue(self, n_tokens):
        prose = self.rng.random() < 0.3
        lines = self.haystack(n_tokens, prose)
        n = self.rng.randint(2, 12)
        keys = set()
        while len(keys) < n:
            keys.add(self.rng.choice(["config", "token", "port", "user", "cache", "build", "limit", "seed", "mode",
                                      "path", "retry", "color"]) + "_" +
                     "".join(self.rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(4)))
        keys = sorted(keys)
        vals = {k: str(self.rng.randint(10000, 99999)) for k in keys}
        self.plant(lines, [f"The value of key {k} is {vals[k]}." for k in keys], prose)
        ask = self.rng.sample(keys, self.rng.randint(1, min(4, n)))
        if len(ask) == 1:
            user = "".join(lines) + f"\n\nWhat is the value of key {ask[0]}?"
            ans = f"The value of key {ask[0]} is {vals[ask[0]]}."
        else:
            user = "".join(lines) + "\n\nGive the values of these keys: " + ", ".join(ask) + "."
            ans = "\n".join(f"{k}: {vals[k]}" for k in ask)
        return [{"role": "user", "content": user}], ans, None, ()

    def vartrack(self, n_tokens):
        prose = self.rng.random() < 0.6
        lines = self.haystack(n_tokens, prose)
        n_chains, n_hops = self.rng.randint(1, 4), self.rng.randint(1, 6)
        names = set()
        while len(names) < n_chains * (n_hops + 1):
            names.add("".join(self.rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(5)))
        names = list(names)
        self.rng.shuffle(names)
        values = self.rng.sample(range(10000, 99999), n_chains)
        chains = [names[c * (n_hops + 1):(c + 1) * (n_hops + 1)] for c in range(n_chains)]
        stmts = []
        for h in range(n_hops + 1):
            hop = [(f"VAR {ch[0]} = {values[c]}." if h == 0 else f"VAR {ch[h]} = VAR {ch[h - 1]}.") for c, ch in
                   enumerate(chains)]
            self.rng.shuffle(hop)
            stmts.extend(hop)
        # statements spread in order through the text
        n = len(lines)
        for k, st in reversed(list(enumerate(stmts))):
            at = int((k + self.rng.random()) / len(stmts) * n)
            lines.insert(at, (" " + st) if prose else ("# " + st + "\n"))
        user = ("Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n" +
                "".join(lines) + f"\nQuestion: Find all variables that are assigned the value {values[0]} in the text "
                "above. Answer with the variable names only, separated by commas.")
        return [{"role": "user", "content": user}], ", ".join(chains[0]), None, ()

    # ---- tools --------------------------------------------------------------------------
    TOOLS = [
        {"type": "function", "function": {"name": "read_file", "description": "Read a file of the repository.",
                                          "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                                                         "required": ["path"]}}},
        {"type": "function", "function": {"name": "search_code", "description": "Search the repository for text.",
                                          "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                                                         "required": ["query"]}}},
    ]

    def tool(self):
        s, f = self.pick_func(need_doc=True)
        if not f or len(s.text) > 16000:
            return None
        tools = self.TOOLS if self.rng.random() < 0.7 else list(reversed(self.TOOLS))
        if self.rng.random() < 0.5:
            user = {"role": "user", "content": f"What does `{f['name']}` in `{s.path}` do?"}
            call = {"name": "read_file", "arguments": {"path": s.path}}
            result = s.text
            final = f"`{f['name']}`: {summary(f['doc'])}"
        else:
            user = {"role": "user", "content": f"Where is the function `{f['name']}` defined?"}
            call = {"name": "search_code", "arguments": {"query": f"def {f['name']}("}}
            result = f"{s.path}:{f['lineno']}: {f['sig'] or 'def ' + f['name']}"
            final = f"`{f['name']}` is defined in `{s.path}` at line {f['lineno']}."
        if self.rng.random() < 0.5:   # the call itself
            return [user], "", tools, (call,)
        msgs = [user, {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "content": result}]
        return msgs, final, tools, ()


SUBJECTS = ["The committee", "A young engineer", "The northern orchard", "Every visitor", "The harbour office",
            "An old clockmaker", "The school choir", "A patient gardener", "The railway museum", "Our neighbour"]
VERBS = ["described the plan", "walked along the shore", "repaired the fence", "painted the hallway",
         "counted the boats", "waited for the bus", "planted new trees", "read the letters", "opened the shutters"]
TIMES = ["on Tuesday", "late in the evening", "after lunch", "before the rain started", "during the holidays",
         "at first light", "in the spring"]
ENDS = ["without any fuss", "and then went home", "while it was still quiet", "as everyone expected",
        "with great care", "and nothing else happened"]


def prose_sentence(rng):
    return f" {rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(TIMES)} {rng.choice(ENDS)}."
