import Dispatch
import Foundation
import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

extension SQLiteStore {
    /// Hands a commit to the writer. It is visible to every read at once (through the
    /// overlay), and written to SQLite by the background writer — or, with `wait` or on a
    /// store without a background writer, before this returns.
    ///
    /// - Parameters:
    ///   - changes: the commit.
    ///   - policy: how to resolve changes made in the store since the context read its objects.
    ///   - claimed: a caller waits for the outcome (`transaction`, `wait`): a failed save is
    ///     reported to it alone, not to `onError` or the next flush.
    ///   - wait: write before returning, and throw if the write fails.
    ///   - onVisible: runs under the store's lock once the commit is visible at its target —
    ///     when it is queued, or, for a commit that waits, once it is written (and never if
    ///     that fails) — so receivers get commits in the order they became visible.
    /// - Throws: `MergeConflictError` under `.error`; with `wait`, the save's error.
    package func submit(_ changes: ChangeSet, policy: MergePolicy, claimed: Bool, wait: Bool,
                onVisible: @escaping @Sendable (ChangeSet) -> Void) throws -> Submission {
        let mustWait = wait || !writesInBackground
        let item = QueueItem(changes: changes, claimed: claimed || mustWait, afterWrite: mustWait ? onVisible : nil,
                             afterFailure: mustWait ? nil : onVisible)
        // A commit that waits becomes visible at its target once written; others now.
        let announce: (ChangeSet) -> Void
        if mustWait {
            announce = { _ in }
        } else {
            announce = onVisible
        }
        var appended: (Submission, Bool)?
        if !(policy.checksStore && !changes.updates.isEmpty) && !changes.touchesUniqueKeys {
            // The fast path, unless a pinned view needs before-images (checked under the lock,
            // so a view pinned concurrently cannot miss this commit).
            appended = state.withLock { state in
                state.pins.isEmpty ? Self.append(item, to: &state, announce: announce) : nil
            }
        }
        if appended == nil {
            // Checked against what is committed now, and queued before anything else can be.
            appended = try withCommittedView { state, reader, db in
                var resolved = item
                resolved.changes = try Self.resolve(changes, policy: policy, reader: &reader)
                resolved.changes = try Self.mergeClaimedInserts(resolved.changes, reader: &reader)
                try Self.checkUniqueness(resolved.changes, reader: &reader)
                try Self.capture(resolved.changes, into: &state.pins, reader: &reader, db: db)
                return Self.append(resolved, to: &state, announce: announce)
            }
        }
        let (submission, start) = appended!
        if mustWait {
            if start { drain(until: submission.sequence) }
            let waiter = FlushWaiter(sequence: submission.sequence)
            register(waiter, upTo: submission.sequence)
            try waiter.wait()
        } else if start {
            writeQueue.async { self.drain() }
        }
        return submission
    }

    /// A commit waiting for the writer.
    struct QueueItem: Sendable {
        var changes: ChangeSet
        /// A caller waits for the outcome; a failure goes to it alone.
        let claimed: Bool
        /// Runs under the lock once the commit is written (for commits visible only then).
        let afterWrite: (@Sendable (ChangeSet) -> Void)?
        /// For a commit announced before it was written: told what undoes it if writing fails,
        /// so the main contexts that took it (and observers) come back to what is stored.
        var afterFailure: (@Sendable (ChangeSet) -> Void)? = nil
        /// A batch operation, which learns its changes only when the writer runs it.
        var batch: BatchOperation? = nil
        var sequence: UInt64 = 0
    }

    /// Appends a resolved commit to the queue and the overlay; says whether a drain must start.
    static func append(_ item: QueueItem, to state: inout State, announce: (ChangeSet) -> Void) -> (Submission, Bool) {
        state.lastSequence += 1
        var item = item
        item.sequence = state.lastSequence
        state.overlay.apply(item.changes, sequence: item.sequence)
        releaseClaims(of: item.changes, in: &state)
        state.queue.append(item)
        announce(item.changes)
        let start = !state.isDraining
        state.isDraining = true
        return (Submission(sequence: item.sequence, changes: item.changes), start)
    }

    // MARK: - Merge policies

    /// The commit as the merge policy says it should be saved, given what is stored now.
    private static func resolve(_ changes: ChangeSet, policy: MergePolicy, reader: inout RowReader) throws -> ChangeSet {
        guard policy.checksStore, !changes.updates.isEmpty else { return changes }
        var resolved = changes
        var updates: [ChangeSet.RowUpdate] = []
        var conflicts: [MergeConflictError.Conflict] = []
        for update in changes.updates {
            let stored = try reader.row(update.id)
            let entity = update.entity
            let changedInStore = entity.storedSlots.filter { slot in
                guard let stored else { return true }
                return !stored.values[slot].isIdentical(to: update.snapshot[slot])
            }
            if changedInStore.isEmpty {
                updates.append(update)
                continue
            }
            switch policy {
            case .objectTrump:
                updates.append(update)
            case .storeTrump:
                guard stored != nil else { continue }
                var kept = update
                kept.slots = []
                kept.values = []
                for (slot, value) in zip(update.slots, update.values) where !changedInStore.contains(slot) {
                    kept.slots.append(slot)
                    kept.values.append(value)
                }
                if !kept.slots.isEmpty { updates.append(kept) }
            case .overwrite:
                guard stored != nil else { continue }
                var whole = update
                whole.slots = entity.storedSlots
                whole.values = entity.storedSlots.map { update.current[$0] }
                updates.append(whole)
            case .rollback:
                continue
            case .error:
                guard let stored else {
                    conflicts.append(.init(objectID: update.id, key: "<deleted>", snapshot: .null, stored: .null, ours: .null))
                    continue
                }
                for slot in changedInStore {
                    conflicts.append(.init(objectID: update.id, key: entity.properties[slot].name,
                                           snapshot: update.snapshot[slot], stored: stored.values[slot], ours: update.current[slot]))
                }
            }
        }
        if !conflicts.isEmpty { throw MergeConflictError(conflicts: conflicts) }
        resolved.updates = updates
        return resolved
    }

    // MARK: - Pinned views

    /// Records, for every pinned view, how the rows this commit changes were before it (the
    /// first change after a pin wins: that is the row as it was when the view was pinned).
    static func capture(_ changes: ChangeSet, into pins: inout [UInt64: PinnedImages],
                                reader: inout RowReader, db: Connection) throws {
        guard !pins.isEmpty else { return }
        var images: [ObjectID: BeforeImage] = [:]
        for insert in changes.inserts { images[insert.id] = .absent }
        for update in changes.updates {
            guard let row = try reader.row(update.id) else { continue }
            var slots: [Int: Value] = [:]
            for slot in update.slots { slots[slot] = row.values[slot] }
            images[update.id] = .slots(update.entity, slots)
        }
        for delete in changes.deletes {
            guard let row = try reader.row(delete.id) else { continue }
            images[delete.id] = .row(row)
        }
        var links: [LinkKey: Bool] = [:]
        for link in changes.links {
            links[link.key] = try reader.linkExists(link.key)
        }
        for id in pins.keys {
            for (objectID, image) in images {
                switch (pins[id]!.rows[objectID], image) {
                case (nil, _):
                    pins[id]!.rows[objectID] = image
                case (.slots(let entity, var earlier)?, .slots(_, let later)):
                    // Slots first changed now keep their value from before this commit.
                    for (slot, value) in later where earlier[slot] == nil { earlier[slot] = value }
                    pins[id]!.rows[objectID] = .slots(entity, earlier)
                default:
                    break
                }
            }
            for (key, existed) in links where pins[id]!.links[key] == nil {
                pins[id]!.links[key] = existed
            }
        }
    }

    // MARK: - The writer

    /// Writes queued commits until none is left, each batch in one transaction, each commit
    /// in its own savepoint. With `until`, it stops once that commit is written and leaves
    /// the rest to the background queue, so a committer waiting for its own write is not
    /// kept writing everyone else's.
    func drain(until: UInt64? = nil) {
        while let batch = takeBatch(until: until), let last = batch.last?.sequence {
            let outcome = write(batch, upTo: last)
            undoAnnounced(batch, outcome)
            for failure in outcome.failures where !failure.claimed { reportError(failure.error) }
            for waiter in finish(batch, outcome, upTo: last) { waiter.resume(store: self) }
        }
    }

    /// What writing one batch did: the commits that failed, and what its batch operations
    /// amounted to.
    private struct BatchOutcome {
        var failures: [(sequence: UInt64, error: any Error, claimed: Bool)] = []
        var batchResults: [UInt64: BatchResult] = [:]

        /// The sequences of the commits that failed.
        var failed: Set<UInt64> { Set(failures.map(\.sequence)) }

        mutating func fail(_ item: QueueItem, _ error: any Error) {
            failures.append((item.sequence, error, item.claimed))
            batchResults[item.sequence] = nil
        }
    }

    /// Takes every commit queued so far off the queue; `nil` when this turn has nothing (more)
    /// to write, after handing the rest to the background queue if `until` stopped early.
    private func takeBatch(until: UInt64?) -> [QueueItem]? {
        let batch = state.withLock { state -> [QueueItem] in
            if let until, state.writtenSequence >= until, !state.queue.isEmpty {
                return []
            }
            let batch = state.queue
            state.queue.removeAll()
            if batch.isEmpty { state.isDraining = false }
            return batch
        }
        guard batch.isEmpty else { return batch }
        if until != nil && state.withLock({ $0.isDraining }) { writeQueue.async { self.drain() } }
        return nil
    }

    /// Writes a batch in one transaction (group commit). A commit alone needs no savepoint: if
    /// it fails, the transaction rolls back whole, as its savepoint would, with the same error
    /// — two statements fewer for every commit that does not share the writer's turn. Together,
    /// each commit gets a savepoint, so that one failing commit fails alone. `COMMIT` runs under
    /// the state lock and the written commits leave the overlay in the same breath, so no read
    /// sees SQLite ahead of the overlay or behind it.
    private func write(_ batch: [QueueItem], upTo last: UInt64) -> BatchOutcome {
        var outcome = BatchOutcome()
        do {
            try writer.withLock { writerState in
                let db = writerState.connection
                try db.writeTransaction({
                    if batch.count == 1 {
                        do {
                            outcome.batchResults[batch[0].sequence] = try writeItem(batch[0], writer: &writerState)
                        } catch {
                            throw Self.saveError(error, graph: graph)
                        }
                        return
                    }
                    for (index, item) in batch.enumerated() {
                        let savepoint = "commit\(index)"
                        try db.execute("SAVEPOINT \(savepoint)")
                        do {
                            outcome.batchResults[item.sequence] = try writeItem(item, writer: &writerState)
                            try db.execute("RELEASE \(savepoint)")
                        } catch {
                            try db.execute("ROLLBACK TO \(savepoint)")
                            try db.execute("RELEASE \(savepoint)")
                            outcome.fail(item, Self.saveError(error, graph: graph))
                        }
                    }
                }, commit: { commit in
                    try self.state.withLock { state in
                        try commit()
                        state.overlay.removeWritten(upTo: last)
                    }
                })
            }
        } catch {
            // The whole transaction failed: nothing of the batch is stored.
            state.withLock { $0.overlay.removeWritten(upTo: last) }
            outcome.failures = batch.map { ($0.sequence, error, $0.claimed) }
        }
        return outcome
    }

    /// Writes one queued commit, or runs one batch operation and returns what it did.
    private func writeItem(_ item: QueueItem, writer: inout WriterState) throws -> BatchResult? {
        if let operation = item.batch { return try execute(operation, db: writer.connection) }
        try apply(item.changes, writer: &writer)
        return nil
    }

    /// Undoes, in the receivers that were told of them, the failed commits of a batch: the
    /// overlay no longer holds them (the transaction's end removed them), so what undoes each
    /// is read from what is committed now.
    private func undoAnnounced(_ batch: [QueueItem], _ outcome: BatchOutcome) {
        let failed = outcome.failed
        let announced = batch.filter { failed.contains($0.sequence) && $0.afterFailure != nil && $0.batch == nil }
        guard !announced.isEmpty else { return }
        do {
            try withCommittedView { _, reader, _ in
                for item in announced {
                    let undo = try Self.undo(item.changes, reader: &reader)
                    if !undo.isEmpty { item.afterFailure?(undo) }
                }
            }
        } catch {
            reportError(error)
        }
    }

    /// Records a written batch: the written sequence, what each stored commit's receivers are
    /// told, the errors for `flush` and for waiting committers. Returns the flush waiters the
    /// batch satisfied, to resume outside the lock.
    private func finish(_ batch: [QueueItem], _ outcome: BatchOutcome, upTo last: UInt64) -> [FlushWaiter] {
        state.withLock { state -> [FlushWaiter] in
            state.writtenSequence = last
            state.transactionCount += 1
            let failed = outcome.failed
            for item in batch where !failed.contains(item.sequence) {
                if let result = outcome.batchResults[item.sequence] {
                    Self.releaseClaims(of: result.changes, in: &state)
                    state.batchResults[item.sequence] = result
                    item.afterWrite?(result.changes)
                } else {
                    item.afterWrite?(item.changes)
                }
            }
            state.errors += outcome.failures.filter { !$0.claimed }.map(\.error)
            for failure in outcome.failures where failure.claimed { state.failures[failure.sequence] = failure.error }
            if state.failures.count > 1024 {
                state.failures = state.failures.filter { $0.key > last - min(last, 1024) }
            }
            let ready = state.waiters.filter { $0.sequence <= last }.map(\.waiter)
            state.waiters.removeAll { $0.sequence <= last }
            return ready
        }
    }

    /// What undoes a commit that was announced but not stored: its inserts deleted, its
    /// changed slots back to their committed values, its deletes restored, its links as they are.
    static func undo(_ changes: ChangeSet, reader: inout RowReader) throws -> ChangeSet {
        var undo = ChangeSet()
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

    /// Applies one commit with the writer connection, inside the caller's transaction.
    private func apply(_ changes: ChangeSet, writer: inout WriterState) throws {
        let db = writer.connection
        // A commit looks each statement up once (per entity, per set of changed slots), then
        // only binds and steps: hashing the SQL text for every row cost more than the row.
        var insertStatements: [ObjectIdentifier: Statement] = [:]
        var updateStatements: [UpdateShape: Statement] = [:]
        // Deletes first, so a value they free can be reused (SQLite checks unique indexes row
        // by row), then rows that trade unique values let go of theirs.
        for delete in changes.deletes {
            for (sql, arguments) in WriteSQL.deletes(delete.id, delete.entity) {
                try db.cachedStatement(sql).bindAndExecute(arguments)
            }
        }
        for (sql, arguments) in WriteSQL.uniqueReleases(changes.updates) {
            try db.cachedStatement(sql).bindAndExecute(arguments)
        }
        for update in changes.updates where !update.slots.isEmpty {
            let entity = update.entity
            let shape = UpdateShape(entity: ObjectIdentifier(entity), slots: update.slots)
            let statement: Statement
            if let known = updateStatements[shape] {
                statement = known
            } else {
                let names = update.slots.map { entity.properties[$0].name }
                let cacheKey = entity.table.name + "\u{0}" + names.joined(separator: "\u{0}")
                let sql = writer.updateSQL[cacheKey] ?? {
                    let sql = WriteSQL.update(entity, slots: update.slots)
                    writer.updateSQL[cacheKey] = sql
                    return sql
                }()
                statement = try db.cachedStatement(sql)
                updateStatements[shape] = statement
            }
            try statement.bind(update.values)
            try statement.bind(.integer(update.id.primaryKey), at: update.values.count + 1)
            try statement.execute()
        }
        for insert in changes.inserts {
            let entity = insert.row.entity
            let statement: Statement
            if let known = insertStatements[ObjectIdentifier(entity)] {
                statement = known
            } else {
                let sql = writer.insertSQL[ObjectIdentifier(entity)] ?? {
                    let sql = WriteSQL.insert(entity)
                    writer.insertSQL[ObjectIdentifier(entity)] = sql
                    return sql
                }()
                statement = try db.cachedStatement(sql)
                insertStatements[ObjectIdentifier(entity)] = statement
            }
            // Bound in place, in `WriteSQL.insertArguments`'s order, without building its
            // array: this loop runs once per inserted row.
            var index = 1
            try statement.bind(.integer(insert.id.primaryKey), at: index)
            index += 1
            if entity.table.hasEntityColumn {
                try statement.bind(.integer(entity.entityCode), at: index)
                index += 1
            }
            for slot in entity.storedSlots {
                try statement.bind(insert.row.values[slot], at: index)
                index += 1
            }
            try statement.execute()
        }
        for link in changes.links {
            let join = link.key.table.quotedIdentifier
            let sql = link.present
                ? "INSERT OR IGNORE INTO \(join) (source, target) VALUES (?, ?)"
                : "DELETE FROM \(join) WHERE source = ? AND target = ?"
            try db.cachedStatement(sql).bindAndExecute([.integer(link.key.source), .integer(link.key.target)])
        }
    }
}

/// The statement an update needs: its entity and the slots it changes.
private struct UpdateShape: Hashable {
    let entity: ObjectIdentifier
    let slots: [Int]
}
