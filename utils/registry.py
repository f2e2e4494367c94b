"""Registries of one-file extensions (metrics, schedules): every module of a package lists its entries in a
module-level list; a file that cannot serve fails with one line naming it."""
import importlib
import pkgutil


def collect(package: str, path, attribute: str, kind: type, error: type) -> dict:
    """name -> entry for every `kind` that the modules of `package` (its __path__ given) list in `attribute`,
    in file-name order."""
    found = {}
    for info in sorted(pkgutil.iter_modules(path), key=lambda i: i.name):
        where = f"{package.replace('.', '/')}/{info.name}.py"
        try:
            module = importlib.import_module(f"{package}.{info.name}")
        except Exception as e:  # noqa: BLE001 - any import failure is the file's fault: name it
            raise error(f"{where} cannot be imported: {type(e).__name__}: {e}") from None
        declared = getattr(module, attribute, None)
        if not isinstance(declared, (list, tuple)) or not all(isinstance(entry, kind) for entry in declared):
            raise error(f"{where}: {attribute} must be a list of {kind.__module__}.{kind.__name__}")
        for entry in declared:
            if entry.name in found:
                raise error(f"{where}: {entry.name!r} is already defined")
            found[entry.name] = entry
    return found
