"""The `workbench` commands, one class each (`workbench.commands.base.Command`): its arguments beside the code that
runs it, the flags several commands share declared once (`workbench.commands.flags`). `workbench.cli` holds the
table of commands and turns bad input into one line and exit code 2."""
