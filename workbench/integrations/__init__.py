"""Other trainers, run as trials of a study by the trial protocol (docs/trainers.md): TRL's GRPOTrainer with the
workbench's replay buffer as a plug-in (`workbench.integrations.trl`). An integration imports the trial engine and
its trainer's library; nothing in the workbench imports an integration (a trial starts it as a command)."""
