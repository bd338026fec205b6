"""Training to accuracy: epochs, evaluation and time to accuracy, apart from the timed runs.

Takes a `TrainingRunRequest` and gives a summary JSON and a per-epoch table
(`to_accuracy`), with checkpoints to stop and resume exactly (`checkpoints`).
"""
