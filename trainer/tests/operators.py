"""What each Kubernetes operator injects into a job's pods for a job of two pods with one process each, read from
the operators' source (see vlmgrpo/launch/schedulers.py for file and commit): used by test_operator_env.py (two processes
on this host) and tests/test_image_trains.py (two containers of the image). No Kubernetes API server runs here."""


def trainer_v2(rank: int, master: str, port: int) -> dict:
    """kubeflow/trainer torch.go EnforceMLPolicy: numNodes 2, numProcPerNode 1."""
    return {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "1", "PET_NODE_RANK": str(rank), "PET_MASTER_ADDR": master,
            "PET_MASTER_PORT": str(port)}


def pytorchjob(rank: int, master: str, port: int) -> dict:
    """training-operator envvar.go setPodEnv and master.go: one Master (rank 0) and one Worker (rank 1)."""
    return {"PYTHONUNBUFFERED": "0", "MASTER_PORT": str(port), "MASTER_ADDR": master, "WORLD_SIZE": "2",
            "RANK": str(rank)}


# operator -> (its variables, the variable each launch value comes from)
OPERATORS = {
    "Kubeflow Trainer v2": (trainer_v2, {"nnodes": "PET_NNODES", "node_rank": "PET_NODE_RANK",
                                         "master_addr": "PET_MASTER_ADDR", "master_port": "PET_MASTER_PORT",
                                         "nproc_per_node": "PET_NPROC_PER_NODE"}),
    "PyTorchJob": (pytorchjob, {"nnodes": "WORLD_SIZE", "node_rank": "RANK", "master_addr": "MASTER_ADDR",
                                "master_port": "MASTER_PORT"}),
}
