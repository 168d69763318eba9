"""The contract between imagegen and the images it builds: one distribution both install (see README.md)."""

# This distribution's name: imagegen leaves it out of what the image locks resolve from the index (it is installed
# from this repository's source beside the trainer).
DISTRIBUTION = "imagegen-contract"
