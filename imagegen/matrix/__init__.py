"""The matrix: matrix.yaml read with the line of every key (yamlsource), its shape (schema), its components
(components), typed facts and image entries (model), the compatibility rules (rules), and the planned images
they resolve to (plan), chosen by --cuda, --torch, ... (select). Pure functions of the file's text. It may
import imagegen.core and imagegen.engine."""
