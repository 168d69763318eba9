#!/bin/bash
# imagegen's shell for every RUN step of its layers (the base layer's SHELL; the trainer layer puts Docker's own back
# for images built FROM it): the step's command, under bash with pipefail, then every file and directory the step
# wrote, and the folders above them, given one fixed time (imagegen/render/contexts.py's LAYER_FILE_TIME, written
# here when the context is rendered). A layer then holds the same bytes whenever and wherever it is built: its tar
# records each file's time, and the times a step leaves are the clock's. The step sees that time as SOURCE_DATE_EPOCH, the
# reproducible-builds convention (useradd dates the password with it, compileall writes hash-checked bytecode), and
# Python hashes strings with seed 0, so the bytecode it writes (marshal orders sets by their hashes) is the same
# from one build to the next. bench/RESULTS.md section 19 compares two builds file by file.
set -o pipefail
started=$(mktemp /dev/shm/imagegen-step.XXXXXX)  # /dev is not the image's: the marker lands in no layer
SOURCE_DATE_EPOCH={{ file_time }} PYTHONHASHSEED=0 /bin/bash -o pipefail -c "$1"
status=$?
# uv writes its cache's state into each distribution it installs from a file (uv_cache.json, listed in RECORD): a
# fact of the build's cache, not of the image, which uv reads only to decide whether to reinstall
find / -xdev -newer "$started" -path '*.dist-info/uv_cache.json' -print0 \
    | while IFS= read -r -d '' cache; do
        sed -i '/\.dist-info\/uv_cache\.json,/d' "${cache%/uv_cache.json}/RECORD" && rm -f "$cache"
    done
# The folders above what the step wrote are in the layer too, with whatever time the build's own mounts left them
find / -xdev -newer "$started" \
    | awk '{ path = $0; print path; while (sub(/\/[^\/]*$/, "", path) && path != "") print path }' | sort -u \
    | tr '\n' '\0' | xargs -0 -r touch --no-dereference --date=@{{ file_time }}
rm -f "$started"
exit "$status"
