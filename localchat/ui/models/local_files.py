"""The Models panel's model files on this machine, and what its Load and Delete do to them (no Gradio here).

A path comes back from the browser with each Load or Delete: only a file the panel lists is acted on. Delete
deletes only what lies in localchat's own models folder (models/own_files.py); a file the window was started
with (--model PATH) is taken off the lists, never deleted; another program's file (LM Studio's, Ollama's, the
hub cache's) is left alone, with a line saying where to delete it.
"""

from __future__ import annotations

from pathlib import Path

from ...errors import ModelLoadError
from ...models.importers import LocalModel, local_models
from ...models.own_files import in_models_folder, remove_own
from ...models.split_files import part_paths
from ..chat.session import Runtime

# What "Found in" each other program's folder means to a person who wants the file gone.
ELSEWHERE = {"lmstudio": "LM Studio", "ollama": "Ollama (`ollama rm`)", "hub": "the hub cache (shared with other "
             "programs)"}


def listed_files(runtime: Runtime) -> list[LocalModel]:
    """The files the panel lists: the one answering now first (wherever it lies), every GGUF found here, and
    the files served earlier that no folder searched holds (a path given with --model)."""
    found = local_models()
    seen = {m.path.resolve() for m in found}
    extra = []
    for name in [runtime.model, *runtime.earlier]:
        path = Path(name)
        if path.suffix.lower() == ".gguf" and path.is_file() and path.resolve() not in seen:
            seen.add(path.resolve())
            extra.append(LocalModel(path.name, path, path.stat().st_size, "path"))
    files = found + extra
    loaded = loaded_file(runtime)
    first = [m for m in files if m.path.resolve() == loaded]
    return first + [m for m in files if m.path.resolve() != loaded]


def loaded_file(runtime: Runtime) -> Path:
    """The file the window answers with now, links resolved."""
    return Path(runtime.engine.worker.model_path).resolve()


def listed(runtime: Runtime, path_text: str) -> LocalModel:
    """The listed file the browser named (by its path as listed); anything else is refused."""
    for model in listed_files(runtime):
        if str(model.path) == path_text:
            return model
    raise ModelLoadError("that file is not in the list of model files on this machine; reopen the Models panel "
                         "and choose one listed there.")


def deletes_file(model: LocalModel) -> bool:
    """Whether Delete deletes the file itself (localchat's own), rather than a link to it or its place in the list."""
    return in_models_folder(model.path) and not model.path.is_symlink()


def delete_question(runtime: Runtime, model: LocalModel) -> str:
    """What Delete will do to `model`, asked before it is done (Markdown)."""
    refuse_loaded(runtime, model)
    name = model.path.name
    if deletes_file(model):
        others = len(part_paths(model.path)) - 1
        whole = f" and its {others} other parts" if others else ""
        return f"Delete **{name}**{whole} from localchat's models folder for good?"
    if in_models_folder(model.path):
        return f"Remove the link **{name}** from localchat's models folder? The file it points at stays."
    if model.source in ELSEWHERE:
        raise ModelLoadError(f"{name} belongs to {ELSEWHERE[model.source]}, not to localchat, so localchat does "
                             f"not delete it; delete it there ({model.path}).")
    return f"Take **{name}** off the list? The file stays where it is ({model.path.parent})."


def refuse_loaded(runtime: Runtime, model: LocalModel) -> None:
    if model.path.resolve() == loaded_file(runtime):
        raise ModelLoadError(f"{model.path.name} is the model answering now, so it cannot be deleted; load "
                             "another model first, then delete this one.")


def delete(runtime: Runtime, model: LocalModel) -> str:
    """Do what delete_question asked about; returns the line that says what was done. The picker, the API's
    /v1/models and its models by name stop listing the file."""
    delete_question(runtime, model)  # the same refusals, checked again: the file or the loaded model may have changed
    if in_models_folder(model.path):
        said = remove_own(model.path)
    else:
        said = (f"Took {model.path.name} off the list; the file stays at {model.path} (localchat deletes only "
                "files in its own models folder).")
    runtime.forget(str(model.path))
    return said

