"""unitfile: parse and patch ExecStart= of real-world units; check them with systemd-analyze."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.unit.unitfile import (
    entries,
    expand_argv,
    flags,
    parse_environment,
    parse_environment_file,
    parse_exec_start,
    patch_unit,
    quote_word,
    service_values,
)
from autotune.unit.verify import verify_unit

UNITS = Path(__file__).parents[1] / "data" / "units"
HAVE_ANALYZE = shutil.which("systemd-analyze") is not None
needs_analyze = pytest.mark.skipif(not HAVE_ANALYZE, reason="systemd-analyze is not installed")

SPEC = {
    "--speculative-algorithm": "EAGLE",
    "--speculative-num-steps": "4",
    "--speculative-eagle-topk": "2",
    "--speculative-num-draft-tokens": "7",
}
SPEC_FLAGS = list(SPEC)

# Every real-world fixture that systemd accepts as it is.
GOOD = [
    "sglang-mtp.service",
    "sglang-quoted.service",
    "override.conf",
    "sglang-envfile.service",
    "sglang-nospec.service",
    "sglang-spec-disabled.service",
]


def read(name: str) -> str:
    # Bytes, not read_text(): universal newlines would hide a CRLF file.
    return (UNITS / name).read_bytes().decode()


def crlf(text: str) -> str:
    return text.replace("\n", "\r\n")


def outside(text: str) -> tuple[str, str]:
    """The bytes before and after the ExecStart= assignment."""
    e = parse_exec_start(text)
    return text[: e.start], text[e.end :]


# --------------------------------------------------------------------------- parsing


def test_continuations_environment_and_commented_flag() -> None:
    e = parse_exec_start(read("sglang-mtp.service"), source="sglang-mtp.service")
    assert e.argv[:4] == ["/usr/bin/env", "python3", "-m", "sglang.launch_server"]
    assert e.multiline and e.prefix == ""
    got = e.flags()
    assert got["--host"] == "0.0.0.0" and got["--port"] == "30000"
    assert got["--trust-remote-code"] is None
    assert got["--speculative-num-draft-tokens"] == "2"
    # A comment line inside a continuation is skipped, as systemd skips it.
    assert "--enable-torch-compile" not in got
    assert got["--max-running-requests"] == "64"
    assert got["--enable-metrics"] is None


def test_span_covers_the_whole_assignment() -> None:
    text = read("sglang-mtp.service")
    e = parse_exec_start(text)
    assert text[e.start : e.end].startswith("ExecStart=/usr/bin/env python3")
    assert text[e.start : e.end].endswith("--enable-metrics")
    assert text[e.end :].startswith("\nRestart=always")
    assert e.line == 17
    assert text[e.words[-1].start : e.words[-1].end] == "--enable-metrics"


def test_quotes_escapes_and_equals_spelling() -> None:
    got = parse_exec_start(read("sglang-quoted.service")).flags()
    assert got["--model-path"] == "/srv/models/Llama 3.1 8B Instruct"
    assert got["--speculative-draft-model-path"] == "/srv/models/EAGLE3 LLaMA3.1 8B"
    assert got["--speculative-num-steps"] == "5"
    assert got["--json-model-override-args"] == '{"rope_scaling": {"type": "yarn", "factor": 4.0}}'
    assert got["--chat-template"] == "/srv/templates/llama-3.jinja"  # \x2d decoded


def test_drop_in_override_resets_exec_start() -> None:
    e = parse_exec_start(read("override.conf"))
    assert e.flags()["--tp"] == "8"
    assert e.line == 4


def test_environment_file_variables_stay_unexpanded() -> None:
    e = parse_exec_start(read("sglang-envfile.service"))
    assert e.flags()["--model-path"] == "${MODEL_PATH}"
    assert e.flags()["--port"] == "$PORT"
    assert service_values(read("sglang-envfile.service"), "EnvironmentFile") == [
        "/etc/default/sglang",
        "-/etc/default/sglang.local",
    ]


def test_prefix_is_kept_apart_from_the_executable() -> None:
    e = parse_exec_start(read("sglang-spec-disabled.service"))
    assert e.prefix == "-"
    assert e.argv[0] == "/usr/bin/env"
    assert e.words[0].raw == "-/usr/bin/env"
    assert not any(f.startswith("--speculative") for f in e.flags())


def test_several_prefixes_and_argv0() -> None:
    e = parse_exec_start("[Service]\nExecStart=-@:/usr/bin/env myname --x $1\n")
    assert e.prefix == "-@:" and e.argv == ["/usr/bin/env", "myname", "--x", "$1"]
    exe, argv = expand_argv(e, {}, {})
    assert exe == "/usr/bin/env" and argv == ["myname", "--x", "$1"]  # ':' keeps $1 as is


def test_entries_see_sections_and_joined_values() -> None:
    found = {(e.section, e.key): e.value for e in entries(read("sglang-mtp.service"))}
    assert found[("Unit", "After")] == "network-online.target"
    assert found[("Install", "WantedBy")] == "multi-user.target"
    assert found[("Service", "ExecStart")].startswith(
        "/usr/bin/env python3 -m sglang.launch_server"
    )


def test_crlf_parses_like_lf() -> None:
    text = read("sglang-mtp.service")
    assert parse_exec_start(crlf(text)).argv == parse_exec_start(text).argv


def test_flags_of_an_argv() -> None:
    argv = ["/bin/x", "-m", "mod", "--a", "1", "--b", "--c=3", "--d", "-1"]
    argv += ["--e=", "--", "--f", "2"]
    assert flags(argv) == {"--a": "1", "--b": None, "--c": "3", "--d": "-1", "--e": ""}


def test_oneshot_may_have_several_exec_start_and_the_last_counts() -> None:
    text = "[Service]\nType=oneshot\nExecStart=/bin/true a\nExecStart=/bin/true --b 1\n"
    assert parse_exec_start(text).flags() == {"--b": "1"}


@pytest.mark.parametrize(
    ("text", "key", "fragment"),
    [
        ("[Unit]\nDescription=x\n", "[Service]", "no [Service] section"),
        ("[Service]\nType=simple\n", "ExecStart", "no ExecStart="),
        ("[Service]\nExecStart=/bin/true\nExecStart=\n", "ExecStart", "no ExecStart="),
        (
            "[Service]\nExecStart=/bin/true a\nExecStart=/bin/true b\n",
            "ExecStart",
            "2 ExecStart= lines (lines 2, 3) with Type=simple",
        ),
        ('[Service]\nExecStart=/bin/true --a "open\n', "ExecStart", 'line 2: unbalanced quote (")'),
        (
            "[Service]\nExecStart=/bin/true \\\n  --a 1 \\\n  --a=2\n",
            "ExecStart",
            "line 2: flag --a is given twice",
        ),
        ("[Service]\nExecStart=/bin/true --a ; /bin/false\n", "ExecStart", "second command"),
        ("[Service]\nExecStart=-@\n", "ExecStart", "no command after the prefix"),
    ],
)
def test_errors_are_one_clear_line(text: str, key: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_exec_start(text, source="x.service").flags()
    assert info.value.file == "x.service" and info.value.key == key
    assert fragment in info.value.problem
    assert "\n" not in str(info.value)


def test_flag_twice_in_a_bare_argv() -> None:
    with pytest.raises(ConfigError, match="flag --a is given twice"):
        flags(["/bin/x", "--a", "1", "--a=2"])


# --------------------------------------------------------------------------- patching


@pytest.mark.parametrize("name", GOOD)
@pytest.mark.parametrize("line_end", ["lf", "crlf"])
def test_patch_sets_spec_flags_and_touches_nothing_else(name: str, line_end: str) -> None:
    text = read(name) if line_end == "lf" else crlf(read(name))
    before = parse_exec_start(text).flags()
    patched = patch_unit(text, SPEC, source=name)

    after = parse_exec_start(patched).flags()
    assert after == {**before, **SPEC}
    assert parse_exec_start(patched).argv[:2] == parse_exec_start(text).argv[:2]
    assert outside(patched) == outside(text)
    assert patch_unit(patched, SPEC) == patched  # idempotent
    if line_end == "crlf":
        assert patched.count("\n") == patched.count("\r\n")


@needs_analyze
@pytest.mark.parametrize("name", GOOD)
def test_systemd_accepts_the_fixtures_and_their_patched_versions(name: str) -> None:
    text = read(name)
    assert verify_unit(text, "sglang.service") == []
    assert verify_unit(patch_unit(text, SPEC), "sglang.service") == []
    assert verify_unit(patch_unit(text, {}, SPEC_FLAGS), "sglang.service") == []
    assert verify_unit(crlf(patch_unit(text, SPEC)), "sglang.service") == []


def test_present_values_change_in_place_keeping_their_spelling() -> None:
    text = read("sglang-quoted.service")
    patched = patch_unit(text, {"--speculative-num-steps": "3", "--model-path": "/m/new"})
    line = next(ln for ln in patched.splitlines() if ln.startswith("ExecStart="))
    assert "--speculative-num-steps=3 " in line
    assert "--model-path=/m/new " in line
    # Everything but the two changed words is byte-identical.
    expected = text.replace("--speculative-num-steps=5", "--speculative-num-steps=3").replace(
        '--model-path="/srv/models/Llama 3.1 8B Instruct"', "--model-path=/m/new"
    )
    assert patched == expected


def test_unchanged_values_keep_their_original_quoting() -> None:
    text = "[Service]\nExecStart=/bin/true --a '3' --b=\"x\"\n"
    assert patch_unit(text, {"--a": "3", "--b": "x"}) == text


def test_continuation_layout_is_kept_when_appending() -> None:
    text = read("sglang-nospec.service")
    patched = patch_unit(text, SPEC)
    assert patched == text.replace(
        "  --port 30000\n",
        "  --port 30000 \\\n"
        "  --speculative-algorithm EAGLE \\\n"
        "  --speculative-num-steps 4 \\\n"
        "  --speculative-eagle-topk 2 \\\n"
        "  --speculative-num-draft-tokens 7\n",
    )


def test_tab_indentation_of_a_drop_in_is_matched() -> None:
    patched = patch_unit(read("override.conf"), {"--max-running-requests": "32"})
    assert "\t--speculative-num-draft-tokens 4 \\\n\t--max-running-requests 32\n" in patched


def test_one_line_command_grows_on_its_line_with_the_dominant_spelling() -> None:
    text = read("sglang-quoted.service")
    patched = patch_unit(text, {"--max-running-requests": "32", "--enable-metrics": None})
    line = next(ln for ln in patched.splitlines() if ln.startswith("ExecStart="))
    assert line.endswith("--port=30001 --max-running-requests=32 --enable-metrics")


def test_spec_disabled_unit_gets_flags_after_the_commented_ones() -> None:
    text = read("sglang-spec-disabled.service")
    patched = patch_unit(text, SPEC)
    assert "#    --speculative-num-steps 3 \\\n" in patched  # the comments stay
    assert "    --port 30000 \\\n    --speculative-algorithm EAGLE \\\n" in patched
    assert parse_exec_start(patched).flags()["--speculative-num-steps"] == "4"


def test_removing_flags_takes_their_lines() -> None:
    text = read("sglang-mtp.service")
    patched = patch_unit(text, {}, SPEC_FLAGS)
    e = parse_exec_start(patched)
    assert "--speculative" not in patched[e.start : e.end]
    assert "    --context-length 262144 \\\n#   --enable-torch-compile \\\n" in patched
    assert outside(patched) == outside(text)
    expected = {k: v for k, v in parse_exec_start(text).flags().items() if k not in SPEC}
    assert parse_exec_start(patched).flags() == expected


def test_removing_the_last_line_ends_the_continuation() -> None:
    text = read("sglang-nospec.service")
    patched = patch_unit(text, {}, ["--port"])
    assert "  --tp 2\nRestart=always\n" in patched
    assert service_values(patched, "Restart") == ["always"]
    assert parse_exec_start(patched).flags() == {
        "--model-path": "/srv/models/Qwen3-32B",
        "--tp": "2",
    }


def test_removing_the_last_line_keeps_comment_lines_out_of_the_command() -> None:
    text = "[Service]\nExecStart=/bin/true \\\n  --a 1 \\\n# note\n  --b 2\nRestart=no\n"
    patched = patch_unit(text, {}, ["--b"])
    assert patched == "[Service]\nExecStart=/bin/true \\\n  --a 1\n# note\nRestart=no\n"


def test_removing_inline_flags_on_shared_lines() -> None:
    text = "[Service]\nExecStart=/bin/true --a 1 --b 2 --c=3 \\\n  --d --e 5\n"
    patched = patch_unit(text, {}, ["--b", "--c", "--d"])
    assert patched == "[Service]\nExecStart=/bin/true --a 1 \\\n  --e 5\n"
    assert patch_unit(text, {}, ["--zzz"]) == text


def test_removing_then_appending_in_one_call() -> None:
    text = "[Service]\nExecStart=/bin/true --a 1 --b 2\n"
    assert patch_unit(text, {"--c": "3"}, ["--b"]) == "[Service]\nExecStart=/bin/true --a 1 --c 3\n"


def test_boolean_and_valued_flags_switch_both_ways() -> None:
    text = "[Service]\nExecStart=/bin/true --a 1 --b --c=3\n"
    patched = patch_unit(text, {"--a": None, "--b": "2", "--c": None})
    assert patched == "[Service]\nExecStart=/bin/true --a --b 2 --c\n"
    assert parse_exec_start(patched).flags() == {"--a": None, "--b": "2", "--c": None}


@pytest.mark.parametrize(
    "value",
    [
        *("a b", "", 'say "hi"', "it's", "50%", "$HOME", "back\\slash", "tab\t", ";", "--dash"),
        *("-1", '{"method": "ngram", "num_speculative_tokens": 3}', '{"a": "it\'s"}'),
    ],
)
def test_values_that_need_quoting_read_back_exactly(value: str) -> None:
    text = "[Service]\nExecStart=/usr/bin/env true --x 1\n"
    patched = patch_unit(text, {"--x": value, "--new": value})
    assert parse_exec_start(patched).flags() == {"--x": value, "--new": value}
    if HAVE_ANALYZE:
        assert verify_unit(patched, "q.service") == []


def test_quote_word_leaves_plain_words_alone() -> None:
    assert quote_word("EAGLE3") == "EAGLE3"
    assert quote_word("/srv/a b") == '"/srv/a b"'
    assert quote_word("50%") == "50%%"
    assert quote_word("$X", env_expand=False) == "$X"
    # JSON reads as the engine's docs write it.
    assert quote_word('{"k": 3}') == "'{\"k\": 3}'"


@pytest.mark.parametrize("bad", ["speculative-num-steps", "-x", "--a=b", "--a b", "--"])
def test_flag_names_are_checked(bad: str) -> None:
    with pytest.raises(ConfigError):
        patch_unit("[Service]\nExecStart=/bin/true\n", {bad: "1"})


def test_patch_errors_name_the_file() -> None:
    with pytest.raises(ConfigError, match=r"^u\.service: ExecStart: no ExecStart="):
        patch_unit("[Service]\nType=simple\n", {"--a": "1"}, source="u.service")


# --------------------------------------------------------------------------- environment


def test_environment_lines() -> None:
    env: dict[str, str] = {}
    for value in service_values(read("sglang-mtp.service"), "Environment"):
        env.update(parse_environment(value))
    assert env == {
        "HF_HOME": "/srv/hf",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3",
        "NCCL_DEBUG": "WARN",
        "SGLANG_LOG_PREFIX": "qwen 122b",
        "PYTHONUNBUFFERED": "1",
    }


def test_environment_file_syntax() -> None:
    text = (
        "# comment\n; also a comment\nMODEL_PATH=/srv/m\nexport PORT=30000\n"
        'QUOTED="a \\"b\\" c"\nSINGLE=\'x $y\'\nSPACED =  v  \nbad line\nLONG=a\\\nb\n'
    )
    assert parse_environment_file(text) == {
        "MODEL_PATH": "/srv/m",
        "PORT": "30000",
        "QUOTED": 'a "b" c',
        "SINGLE": "x $y",
        "SPACED": "v",
        "LONG": "ab",
    }


def test_expand_argv_substitutes_variables_and_specifiers() -> None:
    e = parse_exec_start(read("sglang-envfile.service"))
    exe, argv = expand_argv(e, {"MODEL_PATH": "/srv/m one", "PORT": "30000"}, {})
    assert exe == "/usr/bin/env"
    assert argv[argv.index("--model-path") + 1] == "/srv/m one"  # ${X}: one word
    assert argv[argv.index("--port") + 1] == "30000"
    text = "[Service]\nExecStart=/bin/echo %n %% $$HOME $WORDS ${NONE}x\n"
    exe, argv = expand_argv(parse_exec_start(text), {"WORDS": "a  b"}, {"n": "u.service"})
    assert argv == ["/bin/echo", "u.service", "%", "$HOME", "a", "b", "x"]
    with pytest.raises(ConfigError, match="specifier %Z"):
        expand_argv(parse_exec_start("[Service]\nExecStart=/bin/echo %Z\n"), {}, {})


# --------------------------------------------------------------------------- verify


@needs_analyze
def test_verify_reports_a_broken_unit_under_its_own_name() -> None:
    problems = verify_unit(read("broken.service"), "sglang.service")
    assert problems == [
        "sglang.service:5: Failed to parse service type, ignoring: simpel",
        "sglang.service:7: Unknown key 'Restrat' in section [Service], ignoring.",
    ]


@needs_analyze
def test_verify_missing_executable_and_remote_hosts() -> None:
    text = read("sglang-nospec.service").replace("/usr/bin/env", "/opt/nowhere/bin/python3")
    problems = verify_unit(text, "sglang.service")
    assert problems == [
        "sglang.service: Command /opt/nowhere/bin/python3 is not executable: "
        "No such file or directory"
    ]
    # On another host the executable may well exist.
    assert verify_unit(text, "sglang.service", check_executables=False) == []


@needs_analyze
def test_verify_ignores_dependencies_missing_on_this_machine() -> None:
    text = read("sglang-nospec.service").replace(
        "[Service]",
        "Requires=nvidia-persistenced.service\nAfter=nvidia-persistenced.service\n\n[Service]",
    )
    assert verify_unit(text, "sglang.service") == []


@needs_analyze
def test_verify_refuses_two_commands() -> None:
    text = "[Service]\nExecStart=/usr/bin/env true\nExecStart=/usr/bin/env false\n"
    problems = verify_unit(text, "two.service")
    assert problems[0].startswith("two.service: Service has more than one ExecStart= setting")


def test_verify_needs_a_service_name() -> None:
    with pytest.raises(ConfigError, match="not a service unit name"):
        verify_unit("[Service]\nExecStart=/bin/true\n", "sglang.socket")
    with pytest.raises(ConfigError):
        verify_unit("[Service]\nExecStart=/bin/true\n", "../x.service")


def test_verify_without_systemd_analyze_finds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert verify_unit(read("broken.service"), "sglang.service") == []
