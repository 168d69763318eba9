"""Every version tag of the image is rebuilt from what the image holds and ends in the digest of the inputs
its label records: any difference means the tag lies."""

import re
from typing import Iterable

from imagegen.core import platforms
from imagegen.render.expected import of_inventory
from imagegen.render.tags import DIGEST_CHARS, INPUTS_LABEL, version_prefix
from imagegen.stages.checks.context import Context
from imagegen.stages.results import FAIL, PASS, Check

NAME = "tag.matches_inside"
NAMES, PHASE, NEEDS = (NAME,), "inside", ("inventory",)
# A version tag starts with the trainer's version, then -torch; an alias is an image's name, which may hold -torch
# too (cu124-torch2.6) but starts with a letter.
VERSION_TAG = re.compile(r"\d[\w.+]*-torch")


def tag_matches_inside(facts: dict, versions: dict, in_name: Iterable[str] = ()) -> Check:
    derived = version_prefix(versions.get("vlmgrpo"), versions, in_name)
    label = facts["labels"].get("org.opencontainers.image.version")
    if not label:
        return Check(NAME, FAIL, "no org.opencontainers.image.version label: not an imagegen image, or its labels "
                                 f"were stripped; the image holds {derived}")
    version_tags = [label]
    version_tags += [platforms.without_arch(ref.rsplit(":", 1)[1]) for ref in facts["tags"]
                     if VERSION_TAG.match(ref.rsplit(":", 1)[1])]
    lying = [tag for tag in version_tags if not tag.startswith(derived + "-")]
    if lying:
        return Check(NAME, FAIL, f"tag {lying[0]} but the image holds {derived}")
    inputs = facts["labels"].get(INPUTS_LABEL, "").removeprefix("sha256:")[:DIGEST_CHARS]
    other = [tag for tag in version_tags if not inputs or not tag.endswith("-" + inputs)]
    if other:
        return Check(NAME, FAIL, f"tag {other[0]} does not end in the digest of the inputs the image was built from "
                                 f"({INPUTS_LABEL}={inputs or 'absent'})")
    return Check(NAME, PASS, f"{', '.join(sorted(set(version_tags)))} match the inside")


def run(context: Context) -> list[Check]:
    def judged(found: dict) -> list[Check]:
        expected = of_inventory(found)
        return [tag_matches_inside(context.facts, found["versions"], expected.in_name if expected else [])]
    return context.with_inventory(NAME, judged)
