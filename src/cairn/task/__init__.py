"""Stage 1, the task: Harbor's task format read, validated and hashed (design §1).

Modules: :mod:`~cairn.task.load` (folders → :class:`~cairn.task.model.Task`),
:mod:`~cairn.task.model` (the loaded task and its steps), :mod:`~cairn.task.validate` and
:mod:`~cairn.task.schema_check` (findings with file and line), :mod:`~cairn.task.findings`,
:mod:`~cairn.task.keylines`, :mod:`~cairn.task.envvars` (``${VAR}`` templates),
:mod:`~cairn.task.hashing` (content hashes), :mod:`~cairn.task.init` (``cairn tasks init``).
"""
