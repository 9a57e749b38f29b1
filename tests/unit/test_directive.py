import json
import struct

import pytest

from superfluid.domain.bundle_header import parse_header
from superfluid.domain.directive import (
    Mode,
    check_mtp_head,
    expand_home,
    parse_directive,
    resolve_bundle_path,
)
from superfluid.domain.errors import DirectiveError

HOME = "/home/ada"
EXPECTED = (
    "expected auto | prompt-lookup | mtp-head | a drafter .base path"
    " | dflash/dspark/eagle3/draft-model:<path>"
)


def header(**fields):
    doc = {
        "arch": "qwen3",
        "config": {"hidden_size": 64, "vocab_size": 100, "num_hidden_layers": 4},
    }
    doc.update(fields)
    body = json.dumps(doc).encode()
    return parse_header(b"BASE" + struct.pack("<IQ", 1, len(body)) + body)


def parse(value, files=()):
    return parse_directive(value, home=HOME, is_file=lambda p: p in files)


@pytest.mark.parametrize("value", ["off", "", "   ", None, " off "])
def test_off_or_empty_means_no_speculation(value):
    directive = parse(value)
    assert directive.mode is Mode.OFF
    assert not directive.speculates


@pytest.mark.parametrize(
    ("value", "mode"),
    [("prompt-lookup", Mode.PROMPT_LOOKUP), ("mtp-head", Mode.MTP_HEAD), (" auto ", Mode.AUTO)],
)
def test_named_strategies_parse_after_trimming(value, mode):
    assert parse(value).mode is mode
    assert parse(value).raw == value.strip()


@pytest.mark.parametrize("kind", ["dflash", "dspark", "eagle3", "draft-model"])
def test_a_kind_prefix_names_the_drafter_and_expands_the_home_directory(kind):
    directive = parse(f"{kind}:~/models/d.base")
    assert directive.mode is Mode.DRAFTER
    assert directive.kind == kind
    assert directive.path == "/home/ada/models/d.base"
    assert str(directive.pick) == f"{kind}:/home/ada/models/d.base"


def test_tilde_user_is_left_alone_and_a_lone_tilde_is_home():
    assert expand_home("~bob/d.base", HOME) == "~bob/d.base"
    assert expand_home("~", HOME) == HOME
    assert expand_home("/abs/d.base", HOME) == "/abs/d.base"
    assert parse("dflash:~bob/d.base").path == "~bob/d.base"


def test_a_prefixed_path_need_not_exist_at_parse_time():
    # The catalog and header checks that follow report a missing file in their own words.
    assert parse("eagle3:/nowhere/e.base").path == "/nowhere/e.base"


def test_an_existing_file_is_a_bundle_path_whose_kind_comes_from_its_header():
    directive = parse("~/d.base", files={"/home/ada/d.base"})
    assert directive.mode is Mode.BUNDLE_PATH
    assert directive.path == "/home/ada/d.base"
    assert resolve_bundle_path(directive, header(arch="dflash")).kind == "dflash"
    assert resolve_bundle_path(directive, header(arch="eagle3")).kind == "eagle3"
    assert resolve_bundle_path(directive, header(arch="dspark")).kind == "dspark"
    resolved = resolve_bundle_path(directive, header(arch="qwen3"))
    assert resolved.kind == "draft-model"
    assert str(resolved.pick) == "draft-model:/home/ada/d.base"


def test_an_existing_file_that_is_not_a_bundle_is_refused():
    directive = parse("/m/model.gguf", files={"/m/model.gguf"})
    with pytest.raises(DirectiveError) as err:
        resolve_bundle_path(directive, None)
    assert err.value.message == (
        "--speculate /m/model.gguf: not a .base bundle (convert the drafter first)"
    )


@pytest.mark.parametrize(
    "value", ["fast", "dflash:", "medusa:/x.base", "/missing.base", "Auto", "prompt_lookup"]
)
def test_anything_else_is_refused_with_the_list_of_what_is_expected(value):
    with pytest.raises(DirectiveError) as err:
        parse(value)
    assert err.value.message == f"--speculate {value.strip()}: {EXPECTED}"


def test_mtp_head_on_a_bundle_without_a_head_names_the_converter_version():
    with pytest.raises(DirectiveError) as err:
        check_mtp_head("/m/t.base", header(baserT_version="0.2.3"))
    assert err.value.message == (
        "--speculate mtp-head: /m/t.base carries no speculator head (converted by baseRT 0.2.3);"
        " reconvert it with base-convert >= 0.2.5 from a checkpoint that ships an MTP head,"
        " or use --speculate auto to pair an installed drafter"
    )


def test_mtp_head_without_a_converter_version_omits_the_parenthesis():
    with pytest.raises(DirectiveError) as err:
        check_mtp_head("/m/t.base", header())
    assert err.value.message == (
        "--speculate mtp-head: /m/t.base carries no speculator head; reconvert it with"
        " base-convert >= 0.2.5 from a checkpoint that ships an MTP head, or use --speculate"
        " auto to pair an installed drafter"
    )


def test_mtp_head_refuses_a_head_of_another_kind():
    with pytest.raises(DirectiveError) as err:
        check_mtp_head("/m/t.base", header(speculator={"config": {"kind": "eagle3"}}))
    assert err.value.message == (
        "--speculate mtp-head: /m/t.base's speculator head is `eagle3`, not an MTP head"
    )


def test_mtp_head_is_accepted_for_an_mtp_head_or_an_unreadable_header():
    check_mtp_head("/m/t.base", header(speculator={"config": {"kind": "mtp"}}))
    check_mtp_head("/m/t.gguf", None)
