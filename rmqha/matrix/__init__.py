"""`python -m rmqha.matrix` (`make chaos-matrix [SEEDS=N]`): the guarantee matrix.

For each configuration (2m-2s-sync and 2m-2s-async, each with ASYNC_FLUSH and SYNC_FLUSH; dledger) and seed, one
chaos run (`rmqha.chaos.run --sweep`) injects every fault kind once per role it can hit, one at a time, then
audits the run. Each fault's interval is one cell sample: the sends that started while it was active
(availability = SEND_OK / all), the faulted group's acknowledged sends (from 5 s before it to its heal) and
how many of them every consumer group owed them received (delivered), the sends no broker answered (indeterminate: neither
lost nor delivered), each group's share of answered sends it accepted and the time it accepted none
(availability per group), the records the audit left out (excluded: unexplained ones fail the cell), the
acknowledged losses and divergences the audit blames on it (a loss: on the fault that destroyed it, not
the one active when it was acknowledged; counted again from the audit's per-send findings by the audit's
own rule, rmqha.pipeline.faults.loss_blame, so a run audited before that rule is judged by it too), and the
recovery time (heal -> every slave of the faulted group at its master's offset in the metric samples; a
slave ahead of its master or not answering is not caught up, and a group that did not end byte-equal,
by the audit's replica verdict or the run's ending, never recovered after its first master power loss:
"never"). Each cell is judged against what RocketMQ 4.9 promises for it (PROMISES; the reasoning is in
docs/guarantees.md):

  FAIL           a result the promise excludes: an acknowledged message lost to its users (on no node,
                 never delivered, stranded on a slave, or received and then gone), a divergence; or losses
                 blamed on a fault that was not exercised that no earlier fault of its group explains; or
                 records left out of the figures that EXPLAINED does not cover (an unparsable history line,
                 an acknowledged send owed to no consumer group, an audit count the histories do not match)
  WEAK           a weakness the configuration allows, with its measured size (an async master's power loss)
  not audited    the run's audit wrote no delivery figures (no consumer group, no history, no commit log):
                 the cell cannot be judged, and fails the matrix
  not exercised  the faulted group acknowledged no send while the fault was active, the fault had no
                 visible effect, or the group could no longer replicate (an earlier fault forked it):
                 nothing was tested
  PASS           exercised, and nothing the promise excludes happened

A not-exercised fault cannot have caused what the audit blames on it: those losses move to the earlier
exercised fault of its group that did (reattribute()). Each cell shows how many of its runs exercised it.
An audit FAIL that no cell accounts for (a phantom, a duplicate UNIQ_KEY, a damaged log, a missing queue
entry, a loss no fault explains) fails the matrix too, and is listed under the table; so does a run that
did not happen or was not audited ("not run" / "not audited", counted in the table's header).

DLedger rows (configuration dledger: one Raft group of three, in the default plan; `--configs dledger`):
one sweep of the nemesis's DLedger faults (kill/pause a leader or a follower; on docker, partitions), each
a minority failure, so the promise allows no acknowledged loss and no divergence (a loss FAILS the cell).
From the status samples' "dledger" block: failover (fault start -> another node leads, as the members
say; "n/a" for follower faults and classic rows; a leader fault with none is "not exercised") and
recovery (heal -> every member answers with the leader's committed index: ahead or behind is not caught
up). Every row also shows the longest time its group accepted no send while sends were tried
(unavailable) and the receives beyond a consumer group's first of the sends at stake (duplicates).

Writes OUT/matrix.md (the table), OUT/matrix.json and OUT/matrix.png (a heatmap of the verdicts).
"""
