"""Detection: the built-in probe localizer, external detector processes, and the verdict
contract both speak (docs/formats.md): one JSON object per line, `t` in seconds since
the scenario started, `link` ("a -- b", either order) or `node`, `kind`, `confidence`."""
