"""Every env's prompt wording as named templates, read from a YAML or JSON file (``erl-train --prompts FILE``).

A researcher who holds other wording (the reference's own, a translation, an ablation of one sentence) runs with it
without editing code: the file names templates and gives their text, with the same named fields (``{trace}``,
``{game}``, ...) that the project's text uses; templates the file leaves out keep the project's text. The project's
own wording ships as such a file (``erl_envs/data/prompts.yaml``, written by ``python -m
erl_envs.reflection.prompt_templates --write FILE``), and a test renders it through this module and gets the prompts
of the code byte for byte.

Names are dotted paths: ``grid.<set>.<...>`` (the grid games' first-attempt prompt, per-step lines and retry
reminder per prompt set), ``qa.<set>.<...>`` (HotpotQA's), ``reflection.<...>`` (the reflect phase's instructions,
request and trace, the no-reflection ablation's retry prompt). The templates live in the prompt modules
(``erl_envs.grid.prompts``, ``erl_envs.qa.prompts``, ``erl_envs.reflection.prompts``); ``apply_templates`` writes a
file's text there, so every env and wrapper built afterwards uses it, and returns what it replaced so that the
caller can put it back. The structure around the text (which pieces join into a prompt, and when) stays the code's.

Most names are plain text, shown as written (braces included, as in ``\\boxed{}``). The others are templates the
code fills in (``is_formatted``): such a template may use only the fields its project text uses (with a format spec
of its own if wanted, e.g. ``{average:.2f}``), and writes a literal brace as ``{{`` or ``}}``. Two lines the code
formats by position are named here: ``{steps}`` in a steps-left line and ``{turn}`` in a turn heading. An unknown
name or field, a field-less ``{}``, a value that is not text or a file that is too large or too deep is refused with
one line naming the file and the problem.
"""

from __future__ import annotations

import fnmatch
import string
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator, Mapping

from erl_envs.grid import prompts as grid_prompts
from erl_envs.qa import prompts as qa_prompts
from erl_envs.reflection import prompts as reflection_prompts
from erl_envs.safe_parse import load_data_file

__all__ = ["SHIPPED_FILE", "MAX_FILE_BYTES", "template_names", "template_fields", "is_formatted", "project_templates",
           "load_templates", "apply_templates", "dump_templates"]

SHIPPED_FILE = Path(__file__).resolve().parents[1] / "data" / "prompts.yaml"
MAX_FILE_BYTES = 1 << 20  # the project's wording is ~20 kB

# Where each name (or the names under it) lives: a module attribute, a str or a dict of str (nested). Keys of a dict
# hold values that are not text (the 64 moves of the paper set, the QA tool's JSON schema) or None (a line the set
# does not show): those are not templates.
_SOURCES: dict[str, tuple[ModuleType, str]] = {
    "grid.lenient.instructions": (grid_prompts, "GRID_INSTRUCTIONS"),
    "grid.lenient.reminder": (grid_prompts, "GRID_FORMAT_REMINDER"),
    "grid.lenient.step": (grid_prompts, "GRID_STEP_LINES"),
    "grid.paper": (grid_prompts, "PAPER_SET"),
    "grid.small": (grid_prompts, "SMALL_SET"),
    "qa.lenient.instructions": (qa_prompts, "QA_INSTRUCTIONS"),
    "qa.lenient.reminder": (qa_prompts, "QA_FORMAT_REMINDER"),
    "qa.paper": (qa_prompts, "PAPER_SET"),
    "reflection.lenient.grid_instructions": (reflection_prompts, "GRID_REFLECTION_INSTRUCTIONS"),
    "reflection.lenient.qa_instructions": (reflection_prompts, "QA_REFLECTION_INSTRUCTIONS"),
    "reflection.lenient.generic_instructions": (reflection_prompts, "GENERIC_REFLECTION_INSTRUCTIONS"),
    "reflection.lenient.generic_reminder": (reflection_prompts, "GENERIC_FORMAT_REMINDER"),
    "reflection.lenient.request": (reflection_prompts, "REFLECTION_REQUEST"),
    "reflection.lenient.trace_step": (reflection_prompts, "TRACE_STEP"),
    "reflection.lenient.trace_outcome": (reflection_prompts, "TRACE_OUTCOME"),
    "reflection.no_reflection.note": (reflection_prompts, "NO_REFLECTION_NOTE"),
    "reflection.no_reflection.prompt": (reflection_prompts, "NO_REFLECTION_PROMPT"),
    "reflection.paper": (reflection_prompts, "PAPER_SET"),
    "reflection.small": (reflection_prompts, "SMALL_SET"),
}
# Text under these names is not wording: the QA tool's JSON schema (its name is what the model must call).
_NOT_TEMPLATES = ("qa.paper.tool",)
# The templates the code fills in with ``str.format`` (their braces are fields; ``{{`` and ``}}`` are literal braces).
# Every other name is plain text, shown as written: its braces are text (``\\boxed{}``) and it has no fields.
_FORMATTED = ("grid.*.step.*steps_left", "grid.*.step.*turn", "qa.paper.tools_note", "reflection.lenient.request",
              "reflection.lenient.trace_*", "reflection.no_reflection.prompt", "reflection.paper.reflection_request",
              "reflection.paper.metrics", "reflection.paper.task.*", "reflection.paper.feedback.*",
              "reflection.paper.trace_*", "reflection.small.reflection_request", "reflection.small.trace",
              "reflection.small.move")
# The lines the code formats with one positional argument, by their last name part: the field's name in a file.
_POSITIONAL = {"steps_left": "steps", "turn": "turn"}


def _leaves(value: Any, name: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield name, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{name}.{key}")


def _locations() -> dict[str, tuple[Any, Any]]:
    """Every template name -> (the dict or module holding it, its key or attribute name)."""
    places = {}
    for prefix, (module, attribute) in _SOURCES.items():
        value = getattr(module, attribute)
        if isinstance(value, str):
            places[prefix] = (module, attribute)
            continue
        for name, _ in _leaves(value, prefix):
            if any(name == skip or name.startswith(skip + ".") for skip in _NOT_TEMPLATES):
                continue
            holder = value
            keys = name[len(prefix) + 1:].split(".")
            for key in keys[:-1]:
                holder = holder[key]
            places[name] = (holder, keys[-1])
    return places


def _read(holder: Any, key: str) -> str:
    return getattr(holder, key) if isinstance(holder, ModuleType) else holder[key]


def _write(holder: Any, key: str, text: str) -> None:
    if isinstance(holder, ModuleType):
        setattr(holder, key, text)
    else:
        holder[key] = text


def _fields(template: str) -> list[tuple[str, str, str | None, str | None]]:
    """(literal text, field name, format spec, conversion) parts; raises ValueError on unbalanced braces."""
    return [(literal, field, spec, conversion) for literal, field, spec, conversion in
            string.Formatter().parse(template)]


def _rename(template: str, names: Mapping[str, str]) -> str:
    """``template`` with its fields renamed (``""``: a positional ``{}``), literal braces kept escaped."""
    out = []
    for literal, field, spec, conversion in _fields(template):
        out.append(literal.replace("{", "{{").replace("}", "}}"))
        if field is not None:
            out.append("{" + names.get(field, field) + (f"!{conversion}" if conversion else "")
                       + (f":{spec}" if spec else "") + "}")
    return "".join(out)


def _positional_name(name: str) -> str | None:
    return _POSITIONAL.get(name.rsplit(".", 1)[-1])


def _file_form(name: str, template: str) -> str:
    """The code's text as a file writes it: a positional ``{}`` named."""
    positional = _positional_name(name)
    return _rename(template, {"": positional}) if positional else template


def _code_form(name: str, template: str) -> str:
    positional = _positional_name(name)
    return _rename(template, {positional: ""}) if positional else template


def template_names() -> list[str]:
    """Every template name, sorted."""
    return sorted(_locations())


def project_templates() -> dict[str, str]:
    """Every template as the prompt modules hold it now (the project's wording unless a file was applied), in the
    form a file writes it."""
    return {name: _file_form(name, _read(*place)) for name, place in sorted(_locations().items())}


def is_formatted(name: str) -> bool:
    """Whether the code fills ``name`` in with ``str.format`` (else it is plain text, braces and all)."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in _FORMATTED)


def _field_names(template: str) -> frozenset[str]:
    return frozenset(field for _, field, _, _ in _fields(template) if field is not None)


# The fields of each formatted template in the project's wording (None: plain text), taken when this module is first
# imported, before any file is applied: a file's template may use these and no others.
_PROJECT_FIELDS = {name: _field_names(text) if is_formatted(name) else None
                   for name, text in project_templates().items()}


def template_fields(name: str) -> set[str] | None:
    """The fields a template may use (those of the project's text), or None for plain text."""
    fields = _PROJECT_FIELDS[name]
    return None if fields is None else set(fields)


def _flatten(data: Any, source: str, prefix: str = "") -> dict[str, str]:
    if isinstance(data, str):
        return {prefix: data}
    if not isinstance(data, dict):
        what = f"{prefix} must be a template's text or a mapping of names" if prefix else \
            "the file must hold a mapping of template names"
        raise ValueError(f"{source}: {what}, got {type(data).__name__}")
    flat = {}
    for key, value in data.items():
        if not isinstance(key, str) or not key or "." in key:
            raise ValueError(f"{source}: {key!r} under {prefix or 'the top level'} is not a template name part "
                             f"(text without dots)")
        flat.update(_flatten(value, source, f"{prefix}.{key}" if prefix else key))
    return flat


def _check(name: str, template: str, source: str) -> None:
    if name not in _PROJECT_FIELDS:
        parent = name.rsplit(".", 1)[0]
        children = sorted({n[len(parent) + 1:].split(".")[0] for n in _PROJECT_FIELDS if n.startswith(parent + ".")})
        hint = f"names under {parent}: {', '.join(children)}" if children else \
            f"top-level names: {', '.join(sorted({n.split('.')[0] for n in _PROJECT_FIELDS}))}"
        raise ValueError(f"{source}: unknown template {name!r} ({hint})")
    allowed = _PROJECT_FIELDS[name]
    if allowed is None:  # plain text: anything goes
        return
    try:
        parts = _fields(template)
        # A format spec may hold fields of its own ("{average:{width}}"): those are checked too.
        parts += [part for _, _, spec, _ in parts if spec and "{" in spec for part in _fields(spec)]
    except ValueError as exc:
        raise ValueError(f"{source}: template {name!r} is not a valid format string ({exc}); write a literal brace "
                         "as {{ or }}") from None
    for _, field, _, _ in parts:
        if field is not None and field not in allowed:
            fields = ", ".join("{" + f + "}" for f in sorted(allowed)) or "none"
            shown = "{" + field + "}" if field else "{} (a field without a name)"
            raise ValueError(f"{source}: template {name!r} uses the field {shown}, which it does not have; its "
                             f"fields: {fields}")


def load_templates(path: str | Path) -> dict[str, str]:
    """The templates of a YAML (``.yaml``/``.yml``) or JSON (``.json``) file: nested mappings whose leaves are the
    texts, flattened to dotted names; every name and field is checked against the project's templates."""
    source = f"prompts file {Path(path)}"
    data = load_data_file(path, "prompts file", MAX_FILE_BYTES)
    flat = _flatten({} if data is None else data, source)
    for name, template in flat.items():
        _check(name, template, source)
    return flat


def apply_templates(templates: Mapping[str, str]) -> dict[str, str]:
    """Put ``templates`` (file form, e.g. from ``load_templates``) into the prompt modules; returns the templates it
    replaced, which ``apply_templates`` puts back. Envs and wrappers built afterwards use the new text."""
    places = _locations()
    for name, template in templates.items():
        _check(name, template, "prompt templates")
    previous = {name: _file_form(name, _read(*places[name])) for name in templates}
    for name, template in templates.items():
        _write(*places[name], _code_form(name, template))
    return previous


def dump_templates(templates: Mapping[str, str]) -> str:
    """YAML text of ``templates``, nested by name, each text a literal block, which ``load_templates`` reads back
    unchanged."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        # A literal block when YAML can hold the text as one (no trailing spaces on a line, no tabs, no control
        # characters); quoted otherwise. Either way it reads back to the same string.
        block = "\n" in value and not any(line != line.rstrip() for line in value.split("\n")) and "\t" not in value
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if block else None)

    _Dumper.add_representer(str, text)
    nested: dict[str, Any] = {}
    for name, template in templates.items():
        holder = nested
        *parents, last = name.split(".")
        for part in parents:
            holder = holder.setdefault(part, {})
        holder[last] = template
    header = ("# erl-gym's prompt wording as templates (erl_envs.reflection.prompt_templates); run with other wording\n"
              "# through `erl-train --prompts FILE`, where FILE holds any of these names with the same {fields}.\n")
    return header + yaml.dump(nested, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Write the project's prompt wording as a templates file.")
    parser.add_argument("--write", required=True, help="the YAML file to write (e.g. erl_envs/data/prompts.yaml)")
    args = parser.parse_args(argv)
    Path(args.write).write_text(dump_templates(project_templates()), encoding="utf-8")
    print(f"wrote {len(template_names())} templates to {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
