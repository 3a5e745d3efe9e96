import Dispatch
import _ContextStackCore

extension QueuedStore {
    /// Writes queued commits until none is left, each batch in one transaction, each commit
    /// in its own savepoint. With `until`, it stops once that commit is written and leaves
    /// the rest to the background queue, so a committer waiting for its own write is not
    /// kept writing everyone else's.
    func drain(until: UInt64? = nil) {
        while let (batch, neverStored, merged) = takeBatch(until: until), let last = batch.last?.sequence {
            let outcome = write(batch, upTo: last, neverStored: neverStored, merged: merged)
            undoAnnounced(batch, outcome)
            for failure in outcome.failures where !failure.claimed {
                Execution.reportingWriteFailure { reportError(failure.error) }
            }
            let failedInserts = Self.failedInserts(batch, outcome, neverStored: neverStored)
            for (waiter, error) in finish(outcome, failedInserts, upTo: last) { waiter.resume(reporting: error) }
        }
    }

    /// Takes every commit queued so far off the queue, with the objects that failed commits
    /// inserted (`QueueState.failedInserts`) and those merged into saved rows
    /// (`QueueState.mergedObjects`) — copies that cost nothing until either side changes;
    /// `nil` when this turn has nothing (more) to write, after handing the rest to the
    /// background queue if `until` stopped early.
    private func takeBatch(until: UInt64?) -> (batch: [QueueItem], neverStored: Set<ObjectID>, merged: [ObjectID: ObjectID])? {
        let (batch, neverStored, merged) = state.withLock { state -> ([QueueItem], Set<ObjectID>, [ObjectID: ObjectID]) in
            if let until, state.writtenSequence >= until, !state.queue.isEmpty {
                return ([], [], [:])
            }
            let batch = state.queue
            state.queue.removeAll()
            if batch.isEmpty { state.isDraining = false }
            return (batch, state.failedInserts.objects, state.mergedObjects.rows)
        }
        guard batch.isEmpty else { return (batch, neverStored, merged) }
        if until != nil && state.withLock({ $0.isDraining }) { writeQueue.async { self.drain() } }
        return nil
    }

    /// Writes a batch in one transaction (group commit). A commit alone needs no savepoint: if
    /// it fails, the transaction rolls back whole, as its savepoint would, with the same error
    /// — two statements fewer for every commit that does not share the writer's turn. Together,
    /// each commit gets a savepoint, so that one failing commit fails alone. `COMMIT` runs under
    /// the state lock and the written commits leave the overlay in the same breath, so no read
    /// sees the database ahead of the overlay or behind it.
    ///
    /// The rows the commits change are locked first, all at once (`lockRows`), and a commit
    /// of a group whose error ends the whole transaction (`abandonsTransaction`) fails the
    /// group, which `writeTransaction` may then write again from the start.
    ///
    /// A commit that changes an object in `neverStored`, or relates an object to one, fails
    /// without being written (`SaveError.dependsOnFailedCommit`): it was made while the
    /// commit that inserted that object was visible and not yet written, and that write failed.
    /// Written, its update would change no row and its reference would point at none. The
    /// objects a failing commit inserts join `neverStored` for the commits after it.
    ///
    /// A commit that names an object in `merged` — one a `fetchOrCreate` made whose insert an
    /// earlier commit merged into a row saved meanwhile — is written naming that row instead
    /// (`redirect`), and its receivers are told so; so are the commits after one of this batch
    /// that merges. One that deletes such an object fails (`SaveError.deletesMergedObject`).
    private func write(_ batch: [QueueItem], upTo last: UInt64, neverStored: Set<ObjectID>,
                       merged: [ObjectID: ObjectID]) -> BatchOutcome {
        var outcome = BatchOutcome()
        var batch = batch
        var redirections: [UInt64: ChangeSet] = [:]
        var refusals: [UInt64: SaveError] = [:]
        if !merged.isEmpty { Self.redirect(&batch, from: 0, to: merged, redirections: &redirections, refusals: &refusals) }
        // Why `item` must fail, if it must: a refusal `redirect` found, or a reference to an
        // object whose inserting commit failed — unless that object's row is in the database
        // after all. A commit whose connection broke while the server ran its `COMMIT` reports
        // failing, yet the server may have saved it (Docs/Postgres.md, "Faults"); its objects
        // would otherwise be refused to every later commit. Those found stored leave
        // `neverStored`, here and in `QueueState.failedInserts` (`finish`).
        func refusal(_ item: QueueItem, _ neverStored: inout Set<ObjectID>, writer: inout Writer) throws -> SaveError? {
            if let refused = refusals[item.sequence] { return refused }
            while let id = item.changes.firstReference(to: neverStored) {
                guard try storedObjects([id], writer: &writer).contains(id) else { return .dependsOnFailedCommit(id) }
                neverStored.remove(id)
                outcome.storedAfterAll.insert(id)
            }
            return nil
        }
        if batch.count == 1, let error = refusals[batch[0].sequence] {
            // Failed before a transaction is begun (and the database's write lock taken).
            outcome.fail(batch[0], error)
            state.withLock { state in
                state.removeWritten(upTo: last)
                Self.settleImages(batch, outcome, in: &state)
            }
            return outcome
        }
        let queued = batch
        let redirected = redirections
        let refused = refusals
        // What pinned views are told of rewritten commits, told once the state lock is let go
        // (`PinnedCorrections`).
        var pinCorrections = PinnedCorrections()
        defer { pinCorrections.deliver() }
        do {
            try writeTransaction({ writer in
                // Written again from the start when `writeTransaction` retries.
                outcome = BatchOutcome()
                batch = queued
                var redirections = redirected
                refusals = refused
                var neverStored = neverStored
                try lockRows(of: batch, writer: &writer)
                if batch.count == 1 {
                    // Taken out once: each `batch[0]` of the captured array copied the whole
                    // item (its change set's every array retained and released), four a commit.
                    let item = batch[0]
                    if let error = try refusal(item, &neverStored, writer: &writer) {
                        outcome.fail(item, error)
                        return
                    }
                    do {
                        let written = Self.told(try writeItem(item, writer: &writer), item, redirections[item.sequence])
                        outcome.record(item, written, token: try recordHistory(item, written, writer: &writer))
                    } catch {
                        throw saveError(error)
                    }
                    return
                }
                for index in batch.indices {
                    let item = batch[index]
                    if let error = try refusal(item, &neverStored, writer: &writer) {
                        outcome.fail(item, error)
                        neverStored.formUnion(item.changes.inserts.lazy.map(\.id))
                        continue
                    }
                    let savepoint = "commit\(index)"
                    try execute("SAVEPOINT \(savepoint)", writer: &writer)
                    do {
                        let written = Self.told(try writeItem(item, writer: &writer), item, redirections[item.sequence])
                        outcome.record(item, written, token: try recordHistory(item, written, writer: &writer))
                        try execute("RELEASE \(savepoint)", writer: &writer)
                        if !neverStored.isEmpty { neverStored.subtract(outcome.inserts(of: item).lazy.map(\.id)) }
                        if case .rewritten(_, _, let merged) = written, !merged.isEmpty {
                            Self.redirect(&batch, from: index + 1, to: merged, redirections: &redirections, refusals: &refusals)
                        }
                    } catch where abandonsTransaction(error) {
                        throw error
                    } catch {
                        let failure = error
                        do {
                            try execute("ROLLBACK TO \(savepoint)", writer: &writer)
                            try execute("RELEASE \(savepoint)", writer: &writer)
                        } catch {
                            // The whole transaction ended, its savepoints with it. On SQLite
                            // for the commit's own error (a full disk, an I/O error,
                            // `RAISE(ROLLBACK)`), which every commit of the group then gets, not
                            // "no such savepoint"; on PostgreSQL because the connection broke.
                            throw endsTransactionsForStatementErrors ? failure : error
                        }
                        outcome.fail(item, saveError(failure))
                        neverStored.formUnion(item.changes.inserts.lazy.map(\.id))
                    }
                }
            }, commit: { commit in
                try self.state.withLock { state in
                    state.writeEpoch &+= 1
                    try commit()
                    Self.recordWritten(batch, outcome, upTo: last, in: &state, pinCorrections: &pinCorrections)
                }
            })
        } catch {
            // A transaction whose connection broke once its `COMMIT` may have gone out may be
            // stored after all; the store finds out, and it is then written as recorded.
            let failedAlone = outcome.failed
            if committedAfterAll(batch.map(\.sequence).filter { !failedAlone.contains($0) }, error: error) {
                let written = outcome
                state.withLock { state in
                    state.writeEpoch &+= 1
                    Self.recordWritten(batch, written, upTo: last, in: &state, pinCorrections: &pinCorrections)
                }
                return outcome
            }
            // The whole transaction failed: nothing of the batch is stored. A commit alone may
            // learn of its statements' errors only at `COMMIT` (a store that sends them
            // without waiting, as PostgreSQL's does): they are its own, and read as such.
            let error = batch.count == 1 ? saveError(error) : error
            // A commit of the group that had failed alone keeps its own error (a merge
            // conflict, a duplicate): it is why that commit failed, and it says not to retry
            // blindly where the transaction's error (a connection lost) would invite it.
            var own: [UInt64: any Error] = [:]
            for failure in outcome.failures { own[failure.sequence] = failure.error }
            // Nothing it recorded holds either: a merge it wrote is not one (`finish`).
            outcome = BatchOutcome()
            outcome.failures = batch.map { ($0.sequence, own[$0.sequence] ?? error, $0.claimed) }
            let failed = outcome
            state.withLock { state in
                state.removeWritten(upTo: last)
                Self.settleImages(batch, failed, in: &state)
            }
        }
        return outcome
    }

    /// Takes the written `batch` out of the queue's overlay and tells its receivers and pinned
    /// views, in the hold of the state lock in which its `COMMIT` ran (or in which it was found
    /// committed after all): no read can take a snapshot that shows these commits while their
    /// receivers still lack them, nor read through a view whose images still hold what they
    /// leave.
    private static func recordWritten(_ batch: [QueueItem], _ outcome: BatchOutcome, upTo last: UInt64, in state: inout QueueState,
                                      pinCorrections: inout PinnedCorrections) {
        state.removeWritten(upTo: last)
        announceWritten(batch, outcome, in: &state, pinCorrections: &pinCorrections)
        settleImages(batch, outcome, in: &state)
    }

    /// Points the commits of `batch` from `start` on at the saved rows of `merged`'s objects
    /// (`redirect`), keeping what tells their receivers in `redirections`, and why one must
    /// fail in `refusals`, by sequence.
    private static func redirect(_ batch: inout [QueueItem], from start: Int, to merged: [ObjectID: ObjectID],
                                 redirections: inout [UInt64: ChangeSet], refusals: inout [UInt64: SaveError]) {
        for index in batch.indices.dropFirst(start) where batch[index].batch == nil {
            do {
                guard let (saved, correction) = try redirect(batch[index].changes, to: merged) else { continue }
                batch[index].changes = saved
                redirections[batch[index].sequence, default: ChangeSet()].append(correction)
            } catch {
                refusals[batch[index].sequence] = error
            }
        }
    }

    /// What the writer did with `item`, as its receivers must hear it: a commit the writer
    /// pointed at saved rows before writing it (`redirection`) is rewritten, that correction
    /// first.
    private static func told(_ written: WrittenItem, _ item: QueueItem, _ redirection: ChangeSet?) -> WrittenItem {
        guard let redirection else { return written }
        switch written {
        case .asQueued:
            return .rewritten(saved: item.changes, correction: redirection)
        case .rewritten(let saved, let correction, let merged):
            var both = redirection
            both.append(correction)
            return .rewritten(saved: saved, correction: both, merged: merged)
        case .batch:
            return written
        }
    }

    /// Writes the history of what the writer wrote for `item` — the commit as queued, what a
    /// batch operation amounted to, or the commit as rewritten — in the same transaction.
    private func recordHistory(_ item: QueueItem, _ written: WrittenItem, writer: inout Writer) throws -> HistoryToken? {
        guard tracksHistory else { return nil }
        let changes: ChangeSet
        switch written {
        case .asQueued: changes = item.changes
        case .batch(let result): changes = result.changes
        case .rewritten(let saved, _, _): changes = saved
        }
        let summary = ChangeSummary(changes)
        guard !summary.isEmpty else { return nil }
        return try writeHistory(summary.historyChanges, info: item.changes.info, sequence: item.sequence, writer: &writer)
    }

    /// Undoes, in the receivers that were told of them, the failed commits of a batch: the
    /// overlay no longer holds them (the transaction's end removed them), so what undoes each
    /// is read from what is committed now.
    ///
    /// When that cannot be read either (a server that went away fails the commit and the read
    /// alike), each commit is undone from what it carries: its inserts removed, its changed
    /// values back to those its context started from, its links as they were. Only deletes need
    /// the stored rows back; when a commit has some, the read's error goes to `onError` too, so
    /// the app knows to reset the contexts that took it.
    ///
    /// Pinned views (main contexts that do not merge) that showed a failed commit — it was
    /// queued when they were pinned, whether it waited to be written or not — hear what undoes
    /// it too, read through each view: what it shows now that the commit is gone.
    private func undoAnnounced(_ batch: [QueueItem], _ outcome: BatchOutcome) {
        let failed = outcome.failed
        guard !failed.isEmpty else { return }
        let failedCommits = batch.filter { failed.contains($0.sequence) && $0.batch == nil }
        let announced = failedCommits.filter { $0.correct != nil }
        let first = failedCommits.first?.sequence ?? .max
        let pinned = state.withLock { state in state.pins.filter { $0.value.hearsCorrections(of: first) } }
        guard !announced.isEmpty || !pinned.isEmpty else { return }
        var pinCorrections = PinnedCorrections()
        defer { pinCorrections.deliver() }
        // What undoes the failed commits `view` showed, made by `undo`, for the view.
        func tell(_ view: PinnedImages, _ undo: (QueueItem) throws -> ChangeSet) rethrows {
            guard let correct = view.correct else { return }
            for item in failedCommits where item.sequence <= view.seenUpTo {
                let changes = try undo(item)
                if !changes.isEmpty { pinCorrections.add(changes, to: correct) }
            }
        }
        do {
            try withCommittedView { state, committed in
                // Everything is read before anything is told: a store may run this again when a
                // read fails on a lock (PostgreSQL), and no receiver may hear a correction twice.
                pinCorrections = PinnedCorrections()
                // What the receivers see: commits queued behind that wait to be written are
                // not theirs yet.
                var reader = RowReader(session: ReadSession(graph: committed.session.graph, connection: committed.session.connection,
                                                            overlay: state.overlay), context: nil)
                let undone = try announced.map { item in (item, try Self.undo(item.changes, reader: &reader)) }
                for id in pinned.keys.sorted() {
                    // The view as it is now (it may have been let go of meanwhile).
                    guard let view = state.pins[id] else { continue }
                    var reader = RowReader(session: ReadSession(graph: committed.session.graph, connection: committed.session.connection,
                                                                overlay: state.overlay(forPin: id), pinned: view), context: nil)
                    try tell(view) { try Self.undo($0.changes, reader: &reader) }
                }
                for (item, undo) in undone where !undo.isEmpty { item.correct?(undo) }
            }
        } catch {
            pinCorrections = PinnedCorrections()
            for item in announced {
                let undo = Self.undoFromSnapshots(item.changes)
                if !undo.isEmpty { item.correct?(undo) }
            }
            // The views pinned now that showed them (one pinned again since shows none of them).
            for view in state.withLock({ state in pinned.keys.sorted().compactMap { state.pins[$0] } }) {
                tell(view) { Self.undoFromSnapshots($0.changes) }
            }
            if failedCommits.contains(where: { !$0.changes.deletes.isEmpty }) { Execution.reportingWriteFailure { reportError(error) } }
        }
    }

    /// Brings the images of the views that showed a batch's commits — those queued when the
    /// views were pinned — to what the batch stored, in the same hold of the state lock as the
    /// batch leaves the overlay. A later commit imaged the rows those commits changed for the
    /// views by reading them through the waiting commits, so the images hold their values as
    /// queued, and the views read them as stored. Once written:
    /// - a commit that failed: a row it inserted was never stored, and its image goes; a slot
    ///   or pair it changed shows the stored value again (`PinnedImages.storedSlots`);
    /// - a commit the writer saved otherwise (`WrittenItem.rewritten`): its slots and pairs
    ///   show what it saved, and a row the writer's rules deleted for it is gone;
    /// - a commit saved as queued: its values are now the stored ones under the images.
    ///
    /// Either way a slot or pair that a commit the view shows, still queued, changed too
    /// keeps that commit's value: the view shows it, and it may yet be written.
    private static func settleImages(_ batch: [QueueItem], _ outcome: BatchOutcome, in state: inout QueueState) {
        guard let first = batch.first?.sequence, let last = batch.last?.sequence, !state.pins.isEmpty else { return }
        let failed = outcome.failed
        // What the commits still queued change, read once it is first asked.
        var queued = QueuedChanges(state.queue)
        for id in state.pins.keys.sorted() {
            guard state.pins[id]!.seenUpTo >= first, !state.pins[id]!.isEmpty else { continue }
            var view = state.pins.removeValue(forKey: id)!
            var touched: [ObjectID: Set<Int>] = [:]
            var touchedLinks: Set<LinkKey> = []
            func touch(_ changes: ChangeSet) {
                for update in changes.updates where view.rows[update.id] != nil { touched[update.id, default: []].formUnion(update.slots) }
                for link in changes.links where view.links[link.key] != nil { touchedLinks.insert(link.key) }
            }
            // For images the writer took inside its transaction (a batch operation's, a delete
            // rule's), which record no stored values: a failed commit's slots and pairs go back
            // to what its context started from, the first failed commit's where several
            // changed one — what the failed commits' own undo does.
            var startedFrom: [ObjectID: [Int: Value]] = [:]
            var linkedBefore: [LinkKey: Bool] = [:]
            for item in batch where item.sequence <= view.seenUpTo && item.batch == nil {
                touch(item.changes)
                if failed.contains(item.sequence) {
                    for insert in item.changes.inserts where view.rows[insert.id] != nil { view.setImage(of: insert.id, to: nil) }
                    for update in item.changes.updates where view.rows[update.id] != nil {
                        for slot in update.slots where slot < update.snapshot.count && startedFrom[update.id]?[slot] == nil {
                            startedFrom[update.id, default: [:]][slot] = update.snapshot[slot]
                        }
                    }
                    for link in item.changes.links where linkedBefore[link.key] == nil { linkedBefore[link.key] = !link.present }
                    continue
                }
                view.recordStored(item.changes)
                guard let correction = outcome.rewritten[item.sequence]?.correction else { continue }
                touch(correction)
                view.recordStored(correction)
                for delete in correction.deletes where view.rows[delete.id] != nil { view.setImage(of: delete.id, to: .absent) }
            }
            for (row, slots) in touched {
                let settled = slots.filter { !queued.changed(row, $0, upTo: view.seenUpTo) }
                let unrecorded = settled.filter { view.storedSlots[row]?[$0] == nil && startedFrom[row]?[$0] != nil }.sorted()
                view.setImage(of: row, slots: unrecorded, to: unrecorded.map { startedFrom[row]![$0]! })
                view.showStored(row, slots: settled)
            }
            for key in touchedLinks where !queued.linked(key, upTo: view.seenUpTo) {
                if view.storedLinks[key] == nil, let before = linkedBefore[key] { view.links[key] = before }
                view.showStored(key)
            }
            // Every commit the view shows is written or failed: its images hold for good, and
            // the stored values beside them are no longer needed.
            if view.seenUpTo <= last {
                view.storedSlots = [:]
                view.storedLinks = [:]
            }
            state.pins[id] = view
        }
    }

    /// What undoes a commit without reading the store: see `undoAnnounced`.
    static func undoFromSnapshots(_ changes: ChangeSet) -> ChangeSet {
        var undo = ChangeSet()
        undo.undoesFailedSave = true
        undo.deletes = changes.inserts.map { ($0.id, $0.row.entity) }
        for update in changes.updates where update.slots.allSatisfy({ $0 < update.snapshot.count }) {
            undo.updates.append(.init(id: update.id, entity: update.entity, slots: update.slots,
                                      values: update.slots.map { update.snapshot[$0] }))
        }
        for link in changes.links {
            undo.links.append((link.key, !link.present))
            undo.linkEnds[link.key] = changes.linkEnds[link.key]
        }
        return undo
    }

    /// Tells the receivers of a batch's stored commits what the writer stored: those told only
    /// once written get the commit as written, with its token; those told when it was queued
    /// get the writer's correction, if it rewrote the commit. Runs under the lock, in the same
    /// hold as the transaction's `COMMIT`, which is when reads begin to see what it wrote.
    private static func announceWritten(_ batch: [QueueItem], _ outcome: BatchOutcome, in state: inout QueueState,
                                        pinCorrections: inout PinnedCorrections) {
        let failed = outcome.failed
        for item in batch where !failed.contains(item.sequence) {
            func written(_ changes: ChangeSet) -> ChangeSet {
                var changes = changes
                changes.info = item.changes.info
                changes.info.token = outcome.tokens[item.sequence]
                return changes
            }
            if let result = outcome.batchResults[item.sequence] {
                releaseClaims(of: result.changes, in: &state)
                state.batchResults[item.sequence] = result
                item.afterWrite?(written(result.changes))
            } else if let (saved, correction, _) = outcome.rewritten[item.sequence] {
                releaseClaims(of: correction, in: &state)
                item.afterWrite?(written(saved))
                if !correction.isEmpty {
                    item.correct?(correction)
                    // Views pinned while the commit was queued showed it as queued; their
                    // reads show it as saved from now on.
                    pinCorrections.add(correction, for: item.sequence, in: state)
                }
            } else if let afterWrite = item.afterWrite {
                afterWrite(written(item.changes))
            }
        }
    }

    /// What a written batch changes in `QueueState.failedInserts`: the objects its failed
    /// commits inserted, and those of `neverStored` its written commits inserted after all (a
    /// `fetchOrCreate` that agreed with a failed insert inserts the object itself). Worked out
    /// before the state lock is taken; nothing to do when no commit failed and none did before.
    private static func failedInserts(_ batch: [QueueItem], _ outcome: BatchOutcome,
                                      neverStored: Set<ObjectID>) -> (failed: [[ObjectID]], stored: Set<ObjectID>) {
        let failed = outcome.failed
        var result: (failed: [[ObjectID]], stored: Set<ObjectID>) = ([], [])
        guard !failed.isEmpty || !neverStored.isEmpty else { return result }
        result.stored = outcome.storedAfterAll
        for item in batch {
            if failed.contains(item.sequence) {
                if !item.changes.inserts.isEmpty { result.failed.append(item.changes.inserts.map(\.id)) }
            } else if !neverStored.isEmpty {
                result.stored.formUnion(outcome.inserts(of: item).lazy.map(\.id).filter(neverStored.contains))
            }
        }
        return result
    }

    /// Records a written batch: the written sequence, the errors for `flush` and for waiting
    /// committers. Returns the flush waiters the batch satisfied, with what each reports, to
    /// resume outside the lock.
    private func finish(_ outcome: BatchOutcome, _ failedInserts: (failed: [[ObjectID]], stored: Set<ObjectID>),
                        upTo last: UInt64) -> [(FlushWaiter, (any Error)?)] {
        state.withLock { state -> [(FlushWaiter, (any Error)?)] in
            state.failedInserts.remove(failedInserts.stored)
            for ids in failedInserts.failed { state.failedInserts.add(ids) }
            for sequence in outcome.rewritten.keys.sorted() { state.mergedObjects.add(outcome.rewritten[sequence]!.merged) }
            state.writtenSequence = last
            state.transactionCount += 1
            state.errors += outcome.failures.filter { !$0.claimed }.map(\.error)
            for failure in outcome.failures where failure.claimed { state.failures[failure.sequence] = failure.error }
            if state.failures.count > 1024 {
                state.failures = state.failures.filter { $0.key > last - min(last, 1024) }
            }
            let ready = state.waiters.filter { $0.sequence <= last }.map(\.waiter)
            state.waiters.removeAll { $0.sequence <= last }
            return ready.map { ($0, $0.outcome(in: &state)) }
        }
    }

    /// What undoes a commit that was announced but not stored: its inserts deleted, its
    /// changed slots back to their committed values, its deletes restored, its links as they are.
    static func undo(_ changes: ChangeSet, reader: inout RowReader) throws -> ChangeSet {
        var undo = ChangeSet()
        undo.undoesFailedSave = true
        // The rows read in lists of keys, table by table, and kept by the reader for the looks
        // below: one at a time, a failed import of 100,000 rows was 100,000 statements under
        // the state lock (and as many again for each pinned view that showed it).
        _ = try reader.rows(for: changes.inserts.map(\.id) + changes.updates.map(\.id) + changes.deletes.map(\.id))
        for insert in changes.inserts where try reader.row(insert.id) == nil {
            undo.deletes.append((insert.id, insert.row.entity))
        }
        for update in changes.updates {
            guard let row = try reader.row(update.id) else {
                undo.deletes.append((update.id, update.entity))
                continue
            }
            undo.updates.append(.init(id: update.id, entity: row.entity, slots: update.slots,
                                      values: update.slots.map { row.values[$0] }))
        }
        for delete in changes.deletes {
            if let row = try reader.row(delete.id) { undo.inserts.append((delete.id, row)) }
        }
        for link in changes.links {
            let present = try reader.linkExists(link.key)
            guard present != link.present else { continue }
            undo.links.append((link.key, present))
            undo.linkEnds[link.key] = changes.linkEnds[link.key]
        }
        return undo
    }

}

/// What pinned views (main contexts that do not merge) are to be told of commits they showed:
/// gathered under the state lock, told once it is let go. Telling hands a context its inbox,
/// and may hold the last reference to the context for a moment: its `deinit` then unpins,
/// which takes the state lock — under that lock, the writer would wait for itself.
struct PinnedCorrections {
    private var corrections: [(correct: @Sendable (ChangeSet) -> Void, changes: ChangeSet)] = []

    /// `changes` for every view pinned while the commit `sequence` was queued.
    mutating func add(_ changes: ChangeSet, for sequence: UInt64, in state: QueueState) {
        for id in state.pins.keys.sorted() {
            guard let images = state.pins[id], images.hearsCorrections(of: sequence), let correct = images.correct else { continue }
            corrections.append((correct, changes))
        }
    }

    mutating func add(_ changes: ChangeSet, to correct: @escaping @Sendable (ChangeSet) -> Void) {
        corrections.append((correct, changes))
    }

    /// Tells the views, outside the state lock.
    mutating func deliver() {
        for (correct, changes) in corrections { correct(changes) }
        corrections.removeAll()
    }
}

/// What writing one batch did: the commits that failed, what its batch operations amounted
/// to, and the commits the writer wrote otherwise than queued.
private struct BatchOutcome {
    var failures: [(sequence: UInt64, error: any Error, claimed: Bool)] = []
    var batchResults: [UInt64: BatchResult] = [:]
    var rewritten: [UInt64: (saved: ChangeSet, correction: ChangeSet, merged: [ObjectID: ObjectID])] = [:]
    /// The history tokens of the commits written, when the store tracks history.
    var tokens: [UInt64: HistoryToken] = [:]
    /// Objects of failed inserts whose rows the writer found in the database after all.
    var storedAfterAll: Set<ObjectID> = []

    mutating func record(_ item: QueueItem, _ written: WrittenItem, token: HistoryToken?) {
        if let token { tokens[item.sequence] = token }
        switch written {
        case .asQueued: break
        case .batch(let result): batchResults[item.sequence] = result
        case .rewritten(let saved, let correction, let merged): rewritten[item.sequence] = (saved, correction, merged)
        }
    }

    /// The sequences of the commits that failed.
    var failed: Set<UInt64> { Set(failures.map(\.sequence)) }

    /// The rows a commit written in this batch inserted: those it was queued with, or those
    /// the writer wrote when it rewrote it; none for a batch operation.
    func inserts(of item: QueueItem) -> [(id: ObjectID, row: ObjectRow)] {
        if batchResults[item.sequence] != nil { return [] }
        return rewritten[item.sequence]?.saved.inserts ?? item.changes.inserts
    }

    mutating func fail(_ item: QueueItem, _ error: any Error) {
        failures.append((item.sequence, error, item.claimed))
        batchResults[item.sequence] = nil
        rewritten[item.sequence] = nil
        tokens[item.sequence] = nil
    }
}

/// What queued commits change, by row slot and by join-table pair, read from their change
/// sets once it is first asked (batch operations, which learn their changes when written,
/// count for nothing): which slots and pairs of a pinned view's images hold the values of
/// commits that may still be written (`QueuedStore.settleImages`).
struct QueuedChanges {
    private let items: [QueueItem]
    private var slots: [ObjectID: [(sequence: UInt64, slots: [Int])]]?
    private var links: [LinkKey: [UInt64]]?

    init(_ items: [QueueItem]) { self.items = items }

    /// Whether a commit up to `last` changes `slot` of the row `id`.
    mutating func changed(_ id: ObjectID, _ slot: Int, upTo last: UInt64) -> Bool {
        if slots == nil {
            var found: [ObjectID: [(sequence: UInt64, slots: [Int])]] = [:]
            for item in items where item.batch == nil {
                for update in item.changes.updates { found[update.id, default: []].append((item.sequence, update.slots)) }
            }
            slots = found
        }
        return slots?[id]?.contains { $0.sequence <= last && $0.slots.contains(slot) } ?? false
    }

    /// Whether a commit up to `last` adds or removes the pair `key`.
    mutating func linked(_ key: LinkKey, upTo last: UInt64) -> Bool {
        if links == nil {
            var found: [LinkKey: [UInt64]] = [:]
            for item in items where item.batch == nil {
                for link in item.changes.links { found[link.key, default: []].append(item.sequence) }
            }
            links = found
        }
        return links?[key]?.contains { $0 <= last } ?? false
    }
}
