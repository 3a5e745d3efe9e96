import Dispatch
import _ContextStackCore

extension QueuedStore {
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
        let item = QueueItem(changes: changes, policy: policy, claimed: claimed || mustWait,
                             afterWrite: mustWait ? onVisible : nil, correct: mustWait ? nil : onVisible)
        // A commit that waits becomes visible at its target once written; others now.
        let announce: (ChangeSet) -> Void
        if mustWait {
            announce = { _ in }
        } else {
            announce = onVisible
        }
        var appended: (Submission, Bool)?
        if !changes.checksStore(under: policy) && !changes.touchesUniqueKeys {
            // The fast path, unless a pinned view needs before-images (checked under the lock,
            // so a view pinned concurrently cannot miss this commit).
            appended = state.withLock { state in
                state.pins.isEmpty ? Self.append(item, to: &state, announce: announce) : nil
            }
        }
        while appended == nil {
            var unwritten: UInt64?
            // Checked against what is committed now, and queued before anything else can be.
            appended = try withCommittedView { state, reader in
                unwritten = Self.unwrittenInsertClaimed(by: changes, in: state)
                // A batch operation queued and not yet written is not in the overlay: checked
                // without it, a value it gives or frees would be judged wrongly, and the
                // writer would fail the commit in the background. Its caller waits for it.
                if unwritten == nil && state.lastBatchSequence > state.writtenSequence && changes.touchesUniqueKeys {
                    unwritten = Self.unwrittenBatch(before: changes, in: state)
                }
                if unwritten != nil { return nil }
                var resolved = item
                // Objects merged into rows other processes saved are those rows (`redirect`).
                let pointed = try Self.redirect(changes, to: state.mergedObjects.rows)?.saved ?? changes
                resolved.changes = try Self.resolve(pointed, policy: policy, reader: &reader)
                // The claimed inserts' values are looked up by both steps below: read once.
                if !changes.upserts.isEmpty { reader.storedHolders = .init(minimumCapacity: changes.upserts.count) }
                let merged: [ObjectID: ObjectID]
                (resolved.changes, merged) = try Self.mergeClaimedInserts(resolved.changes, reader: &reader)
                try Self.checkUniqueness(resolved.changes, reader: &reader)
                try Self.capture(resolved.changes, into: &state.pins, reader: &reader)
                // The committing context still holds the objects merged away.
                state.mergedObjects.add(merged)
                return Self.append(resolved, to: &state, announce: announce)
            }
            // An object this commit made with `fetchOrCreate` is one an earlier commit made too,
            // and that commit is not written yet: merged into an insert that may still fail,
            // this commit would become an update of a row that never was. It is checked again
            // once that commit is written (or failed).
            if let unwritten { waitUntilWritten(upTo: unwritten) }
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

    /// The sequence up to which commits must be written before `changes` can be checked:
    /// `changes` inserts an object `fetchOrCreate` claimed (`upserts`) whose ID an earlier
    /// commit inserts that is not written yet — visible to reads (queued from a root) or
    /// waiting unseen (`.persistentStore`) — and whose write may still fail; `nil` when it does
    /// not. Two `fetchOrCreate`s of one unique value share an ID (`claim`), so the second
    /// commit would be merged into that insert (`mergeClaimedInserts`) and, were the first
    /// write to fail, update a row that never was: its object lost without an error.
    static func unwrittenInsertClaimed(by changes: ChangeSet, in state: QueueState) -> UInt64? {
        guard !changes.upserts.isEmpty else { return nil }
        let queued = state.queued
        return changes.inserts.lazy.compactMap { insert -> UInt64? in
            // An entry's sequence is its last commit's, at or after the insert's.
            guard changes.upserts[insert.id] != nil, let entry = queued.entry(for: insert.id),
                  case .inserted = entry.pending else { return nil }
            return entry.sequence
        }.max()
    }

    /// The sequence up to which batch operations must be written before `changes`' uniqueness
    /// can be checked: the last unwritten batch delete, or batch update of an entity whose
    /// unique values `changes` sets; `nil` when there is none.
    static func unwrittenBatch(before changes: ChangeSet, in state: QueueState) -> UInt64? {
        var latest = state.lastBatchDelete > state.writtenSequence ? state.lastBatchDelete : 0
        func consider(_ entity: ResolvedEntity) {
            if let sequence = state.lastBatchUpdate[ObjectIdentifier(entity.rootDescription)], sequence > state.writtenSequence {
                latest = max(latest, sequence)
            }
        }
        for insert in changes.inserts where !insert.row.entity.uniqueConstraints.isEmpty { consider(insert.row.entity) }
        for update in changes.updates where update.slots.contains(where: update.entity.uniqueSlots.contains) { consider(update.entity) }
        return latest > 0 ? latest : nil
    }

    /// Appends a resolved commit to the queue and the overlays (reads' only when it is visible
    /// now, not once written); says whether a drain must start.
    static func append(_ item: QueueItem, to state: inout QueueState, announce: (ChangeSet) -> Void) -> (Submission, Bool) {
        state.lastSequence += 1
        var item = item
        item.sequence = state.lastSequence
        switch item.batch {
        case .update(let entity, _, _)?: state.lastBatchUpdate[ObjectIdentifier(entity.rootDescription)] = item.sequence
        case .delete?: state.lastBatchDelete = item.sequence
        case nil: break
        }
        state.queue(item.changes, sequence: item.sequence, visible: item.afterWrite == nil)
        releaseClaims(of: item.changes, in: &state)
        state.queue.append(item)
        announce(item.changes)
        let start = !state.isDraining
        state.isDraining = true
        return (Submission(sequence: item.sequence, changes: item.changes), start)
    }

    // MARK: - Merge policies

    /// The commit as the merge policy says it should be saved, given what is stored now.
    package static func resolve(_ changes: ChangeSet, policy: MergePolicy, reader: inout RowReader) throws -> ChangeSet {
        guard changes.checksStore(under: policy) else { return changes }
        var resolved = changes
        var updates: [ChangeSet.RowUpdate] = []
        var conflicts: [MergeConflictError.Conflict] = []
        for update in changes.updates {
            // An update pointed at the row its object was merged into (`redirect`) has no
            // snapshot: what its context started from was never stored. It wins.
            if update.snapshot.isEmpty {
                updates.append(update)
                continue
            }
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
            switch update.expectsStoredRow ? .error : policy {
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
                guard let stored else { continue }
                var whole = update
                whole.slots = entity.storedSlots
                whole.values = entity.storedSlots.map { update.current[$0] }
                // What it overwrites is what it started from now: a reference it writes back
                // that the store no longer holds is one it makes (`keepReferencesWhole`).
                for slot in changedInStore { whole.snapshot[slot] = stored.values[slot] }
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
        if !conflicts.isEmpty {
            // Under another policy, only `apply(_:expecting:)`'s objects conflict.
            throw MergeConflictError(conflicts: conflicts, explanation: policy == .error ? nil : MergeConflictError.appliedExpecting)
        }
        resolved.updates = updates
        return resolved
    }

    /// What tells receivers of `updates` how the merge policy resolved them against another
    /// process's changes, read from the locked rows before they are written: stored values for
    /// the slots it kept (`.storeTrump`, `.rollback`), the context's values for the slots it
    /// wrote besides (`.overwrite`), and the objects another process deleted.
    package static func keptValues(_ updates: [ChangeSet.RowUpdate], resolved: [ChangeSet.RowUpdate],
                                   reader: inout RowReader) throws -> ChangeSet {
        var correction = ChangeSet()
        var written: [ObjectID: [Int: Value]] = [:]
        for update in resolved {
            for (slot, value) in zip(update.slots, update.values) { written[update.id, default: [:]][slot] = value }
        }
        for update in updates {
            guard let stored = try reader.row(update.id) else {
                correction.deletes.append((update.id, update.entity))
                continue
            }
            let told = Set(update.slots)
            let kept = update.slots.filter { written[update.id]?[$0] == nil }
            let added = (written[update.id] ?? [:]).keys.filter { !told.contains($0) }.sorted()
            guard !kept.isEmpty || !added.isEmpty else { continue }
            correction.updates.append(.init(id: update.id, entity: stored.entity, slots: kept + added,
                                            values: kept.map { stored.values[$0] } + added.map { written[update.id]![$0]! }))
        }
        return correction
    }

    // MARK: - Pinned views

    /// Records, for every pinned view, how the rows this commit changes were before it (the
    /// first change after a pin wins: that is the row as it was when the view was pinned).
    /// Where commits queued before the view was pinned, and not yet written, changed a slot or
    /// pair, the view shows their values, and its images record the stored ones beside them:
    /// those commits may still fail (`PinnedImages.storedSlots`).
    ///
    /// With `correcting`, the writer is saving the commit of that sequence otherwise than
    /// queued (its delete rules reached rows its context did not know): the views that showed
    /// the commit hear `changes` as its correction, and read these rows as stored from now on
    /// rather than as they were before — the two must agree.
    static func capture(_ changes: ChangeSet, into pins: inout [UInt64: PinnedImages],
                        correcting sequence: UInt64? = nil, reader: inout RowReader) throws {
        guard !pins.isEmpty else { return }
        // The views that take images of this commit: those that hear it as a correction read
        // its rows as stored instead.
        func takesImages(_ view: PinnedImages) -> Bool { !(sequence.map { view.hearsCorrections(of: $0) } ?? false) }
        var images: [ObjectID: BeforeImage] = [:]
        var stored: [ObjectID: [Int: Value]] = [:]
        for insert in changes.inserts { images[insert.id] = .absent }
        for update in changes.updates {
            guard let row = try reader.row(update.id) else { continue }
            // Two updates of one row in one commit (a delete rule clearing two of its to-ones)
            // add up: each slot's value from before the commit.
            var slots: [Int: Value] = [:]
            if case .slots(_, let earlier)? = images[update.id] { slots = earlier }
            for slot in update.slots where slots[slot] == nil { slots[slot] = row.values[slot] }
            images[update.id] = .slots(update.entity, slots)
            stored[update.id, default: [:]].merge(try reader.storedValues(of: update.id, underOverlay: update.slots)) { first, _ in first }
        }
        for delete in changes.deletes {
            guard let row = try reader.row(delete.id) else { continue }
            images[delete.id] = .row(row)
            stored[delete.id] = try reader.storedValues(of: delete.id, underOverlay: row.values.indices)
        }
        var links: [LinkKey: (existed: Bool, stored: Bool?)] = [:]
        for link in changes.links {
            // Whether it is stored, under the commits queued, is read only for a pair some view
            // takes an image of now.
            let imagedNow = pins.values.contains { $0.links[link.key] == nil && takesImages($0) }
            links[link.key] = (try reader.linkExists(link.key), imagedNow ? try reader.storedLink(underOverlay: link.key) : nil)
        }
        // The keys copied, and each view taken out while it changes: its images are not
        // copied for it.
        for id in Array(pins.keys) where takesImages(pins[id]!) {
            var view = pins.removeValue(forKey: id)!
            for (objectID, image) in images {
                // The slots this commit images first for the view.
                let added: [Int]
                switch (view.rows[objectID], image) {
                case (nil, _):
                    view.rows[objectID] = image
                    added = view.imagedSlots(of: objectID)
                case (.slots(let entity, var earlier)?, .slots(_, let later)):
                    // Slots first changed now keep their value from before this commit.
                    added = later.keys.filter { earlier[$0] == nil }
                    for slot in added { earlier[slot] = later[slot] }
                    view.rows[objectID] = .slots(entity, earlier)
                case (.slots(_, let earlier)?, .row(var row)):
                    // Changed since the pin, now deleted: the whole row as it was at the pin,
                    // or the view would lose it with the stored row.
                    added = row.values.indices.filter { earlier[$0] == nil }
                    for (slot, value) in earlier where slot < row.values.count { row.values[slot] = value }
                    view.rows[objectID] = .row(row)
                default:
                    added = []
                }
                if let values = stored[objectID] {
                    for slot in added { if let value = values[slot] { view.storedSlots[objectID, default: [:]][slot] = value } }
                }
            }
            for (key, link) in links where view.links[key] == nil {
                view.links[key] = link.existed
                view.storedLinks[key] = link.stored
            }
            pins[id] = view
        }
    }
}
