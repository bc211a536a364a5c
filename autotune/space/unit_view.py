"""For the unit writer (`unit/`, `run/trial.py`) and for people: the launch flags,
environment variables and companion files a config puts in the unit, and the unit patched."""

from __future__ import annotations

import json
from collections.abc import Mapping

from autotune.space.base import SpaceBase
from autotune.space.values import Param, Value, json_text, render


class UnitView(SpaceBase):
    def launch_flags(self) -> dict[str, str]:
        """Every launch flag the space sets -> its (first) parameter (environment variables
        not); the several fields of a JSON flag are one flag."""
        out: dict[str, str] = {}
        for n, p in self.params.items():
            if p.flag:
                out.setdefault(p.flag, n)
        return out

    def flags(self, config: Mapping[str, Value], unit_dir: str = ".") -> dict[str, str | None]:
        """The launch flags `config` sets (parameters that do not apply set none; a bare
        boolean flag maps to None; a companion file's flag to its path in `unit_dir`)."""
        out: dict[str, str | None] = {}
        objects = self.json_objects(config)
        for n in self.order:
            p = self.params[n]
            if p.json is not None:
                if p.flag in objects and p.flag not in out:
                    out[p.flag] = json_text(objects[p.flag])
                continue
            if n not in config or not p.flag or self._absent(p, config[n]):
                continue
            out[p.flag] = p.file.path(unit_dir) if p.file else p.rendered(config[n])
        return out

    def json_objects(self, config: Mapping[str, Value]) -> dict[str, dict[str, Value]]:
        """Each JSON flag `config` sets -> its object, fields in the space's order. A flag
        whose fields all do not apply, or one of whose fields is its `builtin`, is absent."""
        objects: dict[str, dict[str, Value]] = {}
        off: set[str] = set()
        for n in self.order:
            p = self.params[n]
            if p.json is None or n not in config:
                continue
            if self._absent(p, config[n]):
                off.add(p.flag)
            else:
                objects.setdefault(p.flag, {})[p.json.key] = config[n]
        return {flag: obj for flag, obj in objects.items() if flag not in off}

    def removed_flags(self, config: Mapping[str, Value]) -> list[str]:
        """Flags of parameters that do not apply to `config` (or are off): out of the unit."""
        objects = self.json_objects(config)
        gone: list[str] = []
        for n in self.order:
            p = self.params[n]
            if p.json is not None:
                absent = p.flag not in objects
            else:
                absent = bool(p.flag) and (n not in config or self._absent(p, config[n]))
            if absent and p.flag not in gone:
                gone.append(p.flag)
        return gone

    def describe(self, config: Mapping[str, Value]) -> str:
        """What `config` puts in the unit, for people: `--flag value`, `--switch`,
        `NAME=value` (environment), `--flag <file: value>` (a companion file)."""
        words = []
        objects = self.json_objects(config)
        shown: set[str] = set()
        for n in self.order:
            p = self.params[n]
            if p.json is not None:
                if p.flag in shown or n not in config:
                    continue
                shown.add(p.flag)
                obj = objects.get(p.flag)
                words.append(f"{p.flag} '{json_text(obj)}'" if obj else f"no {p.flag}")
                continue
            if n not in config or (p.flag and self._absent(p, config[n])):
                continue
            v = config[n]
            if p.env is not None:
                words.append(f"{p.env}={p.rendered(v)}")
            elif p.file is not None:
                words.append(f"{p.flag} <{p.file.name}: {render(v)}>")
            elif p.rendered(v) is None:
                words.append(p.flag)
            else:
                words.append(f"{p.flag} {p.rendered(v)}")
        return " ".join(words)

    def environment(self, config: Mapping[str, Value]) -> dict[str, str]:
        """`Environment=` variables `config` sets."""
        out: dict[str, str] = {}
        for n in self.order:
            p = self.params[n]
            if p.env is not None and n in config:
                out[p.env] = p.rendered(config[n]) or ""
        return out

    def removed_environment(self, config: Mapping[str, Value]) -> list[str]:
        return [p.env for n, p in self.params.items() if p.env is not None and n not in config]

    def files(self, config: Mapping[str, Value], unit_dir: str) -> dict[str, str | None]:
        """Companion files on the host -> their text for `config` (None: must not exist)."""
        out: dict[str, str | None] = {}
        for n in self.order:
            p = self.params[n]
            if p.file is None:
                continue
            path = p.file.path(unit_dir)
            present = n in config and not self._absent(p, config[n])
            out[path] = p.file.text(config[n]) if present else None
        return out

    def companion_paths(self, unit_dir: str) -> list[str]:
        return [p.file.path(unit_dir) for p in self.params.values() if p.file is not None]

    @staticmethod
    def _absent(p: Param, value: Value) -> bool:
        """A value that puts nothing in the unit: a boolean flag off, a file's builtin."""
        if p.json is not None:
            return p.json.builtin is not None and value == p.json.builtin
        if p.type == "bool" and p.env is None:
            return not value
        return p.file is not None and p.file.builtin is not None and value == p.file.builtin

    def patch_unit(
        self,
        unit_text: str,
        config: Mapping[str, Value],
        source: str | None = None,
        unit_dir: str = ".",
    ) -> str:
        """`unit_text` running `config`: its flags and environment set, those that do not
        apply removed; every other byte unchanged."""
        from autotune.unit import unitenv, unitfile

        flags = self.flags(config, unit_dir)
        json_flags = {p.flag for p in self.params.values() if p.json is not None}
        if json_flags & flags.keys():
            current = unitfile.parse_exec_start(unit_text, source=source).flags()
            for flag in json_flags & flags.keys():
                flags[flag] = self.merged_json(flag, flags[flag], current.get(flag))
        text = unitfile.patch_unit(unit_text, flags, self.removed_flags(config), source=source)
        env, gone = self.environment(config), self.removed_environment(config)
        if env or gone:
            text = unitenv.patch_environment(text, env, gone, source=source)
        return text

    def merged_json(self, flag: str, ours: str | None, theirs: str | None) -> str | None:
        """The JSON flag's value: the space's fields, then the unit's own other fields (a
        draft model's path, say) as the unit has them. A unit value that is not a JSON
        object is replaced whole."""
        try:
            unit_obj = json.loads(theirs) if theirs else None
        except ValueError:
            unit_obj = None
        if ours is None or not isinstance(unit_obj, dict):
            return ours
        owned = {p.json.key for p in self.params.values() if p.json and p.flag == flag}
        fields = json.loads(ours)
        merged = {k: v for k, v in unit_obj.items() if k not in owned or k in fields}
        merged.update(fields)  # the unit's order where it has the field, ours after
        return json_text(merged)
