"""commscope.util.text: lines a user reads, kept short at any world size."""

def test_problems_said_of_several_ranks_are_one_line_each():
    from commscope.util.text import grouped_by_rank

    lines = [f"rank {r}: failed: hang watchdog: collective did not finish within 600 s" for r in (0, 1, 2, 4)]
    lines += ["no folder for rank(s) 3 of 5"]
    lines += [f"rank {r}: the hang watchdog fired (see /runs/x/rank{r}/watchdog.json)" for r in (0, 1, 2, 4)]
    lines += ["rank 3: failed: terminated by signal SIGTERM (the launcher stopped the job)"]
    assert grouped_by_rank(lines) == [
        "ranks 0-2,4: failed: hang watchdog: collective did not finish within 600 s",
        "no folder for rank(s) 3 of 5",
        "ranks 0-2,4: the hang watchdog fired (see /runs/x/rank<N>/watchdog.json)",
        "rank 3: failed: terminated by signal SIGTERM (the launcher stopped the job)"]
    one = ["rank 7: the hang watchdog fired (see /runs/x/rank7/watchdog.json)"]
    assert grouped_by_rank(one) == one  # a rank alone keeps its own line, path and all
    assert len(grouped_by_rank([f"rank {r}: no events.jsonl" for r in range(0, 4096, 2)])[0]) < 200
