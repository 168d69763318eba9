"""A CycloneDX SBOM of an image, from what the image itself reports.

The inventory program (stages.inventory) runs inside the image with the image's own Python: every
distribution importlib.metadata finds (name, version, license fields, the archive hashes pip recorded for
URL installs) and every OS package the package manager lists (dpkg or rpm). cyclonedx-python-lib turns
that into the document; nothing is guessed from the matrix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cyclonedx.contrib.license.factories import LicenseFactory
from cyclonedx.model import HashAlgorithm, HashType, Property
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL

from imagegen_contract import atomic
from imagegen.engine import containers
from imagegen.stages import inventory

MEDIA_TYPE = "application/vnd.cyclonedx+json"
SUFFIX = ".cdx.json"
HASH_ALGORITHMS = {"sha256": HashAlgorithm.SHA_256, "sha384": HashAlgorithm.SHA_384,
                   "sha512": HashAlgorithm.SHA_512, "sha1": HashAlgorithm.SHA_1, "md5": HashAlgorithm.MD5}


@dataclass(frozen=True)
class Sbom:
    text: str  # the CycloneDX JSON document
    python_components: int
    os_components: int

    @property
    def counts(self) -> dict[str, int]:
        return {"python": self.python_components, "os": self.os_components}


def of_image(image: str, inventory_program: str, *, client=None) -> Sbom:
    facts = containers.image_facts(image, client=client)
    return document(facts, inventory.of_image(image, inventory_program, client=client))


def document(facts: dict, found: dict) -> Sbom:
    """The CycloneDX 1.6 document for an image (`containers.image_facts`) and its inventory."""
    bom = Bom()
    bom.metadata.component = root = _image_component(facts)
    python = [_python_component(entry) for entry in found["distributions"]]
    system = [_os_component(entry, found["package_manager"], found["os"] or {}) for entry in found["os_packages"]]
    for component in (*python, *system):
        bom.components.add(component)
    bom.register_dependency(root, [*python, *system])
    return Sbom(JsonV1Dot6(bom).output_as_string(indent=2) + "\n", len(python), len(system))


def _image_component(facts: dict) -> Component:
    reference = next(iter(facts["tags"]), facts["id"])
    name, _, version = reference.rpartition(":") if ":" in reference.rsplit("/", 1)[-1] else (reference, "", "")
    algorithm, _, digest = facts["id"].partition(":")
    return Component(type=ComponentType.CONTAINER, name=name, version=version or None, bom_ref=facts["id"],
                     hashes=[HashType(alg=HASH_ALGORITHMS[algorithm], content=digest)] if digest else [],
                     properties=[Property(name=f"label:{key}", value=value)
                                 for key, value in sorted(facts["labels"].items())])


def _python_component(entry: dict) -> Component:
    purl = PackageURL(type="pypi", name=entry["name"].lower().replace("_", "-"), version=entry["version"])
    return Component(type=ComponentType.LIBRARY, name=entry["name"], version=entry["version"], purl=purl,
                     bom_ref=purl.to_string(), licenses=_licenses(entry),
                     hashes=[HashType(alg=HASH_ALGORITHMS[alg], content=value)
                             for alg, value in sorted(entry["hashes"].items()) if alg in HASH_ALGORITHMS])


def _licenses(entry: dict) -> list:
    """The PEP 639 expression, else a one-line License field, else the license classifiers."""
    factory = LicenseFactory()
    license_text = (entry["license"] or "").strip()
    if entry["license_expression"]:
        return [factory.make_from_string(entry["license_expression"])]
    if license_text and "\n" not in license_text and len(license_text) <= 100 and license_text != "UNKNOWN":
        return [factory.make_from_string(license_text)]
    return [factory.make_with_name(classifier.rsplit(" :: ", 1)[-1]) for classifier in entry["license_classifiers"]]


def _os_component(entry: dict, manager: str, system: dict) -> Component:
    distro = "-".join(part for part in (system.get("id"), system.get("version_id")) if part)
    purl = PackageURL(type=manager, namespace=system.get("id"), name=entry["name"], version=entry["version"],
                      qualifiers={"arch": entry["arch"], **({"distro": distro} if distro else {})})
    return Component(type=ComponentType.LIBRARY if entry["name"].startswith("lib") else ComponentType.APPLICATION,
                     name=entry["name"], version=entry["version"], purl=purl, bom_ref=purl.to_string())


def write(path: Path, sbom: Sbom) -> None:
    atomic.write_text(path, sbom.text)


def path_for(reports_dir: Path, image_name: str) -> Path:
    """reports/sbom/IMAGE.cdx.json, next to the build report."""
    return reports_dir / "sbom" / f"{image_name}{SUFFIX}"
