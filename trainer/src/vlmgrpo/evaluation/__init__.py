"""What a trained model scores: `vlmgrpo eval` (REC accuracy and VLM-R1's other tasks) and `vlmgrpo score` (the
rewards on given completions). Imports run and everything below it."""
