import Foundation
import Synchronization
import _ContextStackCore

/// How a main context receives commits: change sets handed over by other contexts and the
/// store, applied before its next read or on the main actor's next turn.
extension ContextCore {
    /// Hands a commit to this main context from any thread; it is applied when the next public
    /// read starts, or on the main actor's next turn, whichever comes first.
    package func handOver(_ changes: ChangeSet) {
        inbox.withLock { $0.append(changes) }
        inboxHasWork.store(true, ordering: .releasing)
        DispatchQueue.main.async { [self] in
            if inboxHasWork.load(ordering: .acquiring) { applyInbox() }
        }
    }

    /// Hands a correction of this pinned view over (`makePin`): applied as a handed-over commit
    /// is, and then, on the main actor, told to `afterCorrection` with the objects it touched —
    /// a context that does not merge hears of no commit, so its live results would otherwise
    /// keep showing what the correction undid. Dropped when it was meant for a view the context
    /// has let go of since (`reset()`).
    func handOverCorrection(_ changes: ChangeSet, epoch: UInt64) {
        let current = inbox.withLock { inbox in
            guard pinEpoch.load(ordering: .relaxed) == epoch else { return false }
            inbox.append(changes)
            return true
        }
        guard current else { return }
        inboxHasWork.store(true, ordering: .releasing)
        DispatchQueue.main.async { [self] in
            MainActor.assumeIsolated {
                applyInbox()
                guard pinEpoch.load(ordering: .relaxed) == epoch, let afterCorrection else { return }
                let summary = ChangeSummary(changes)
                afterCorrection(summary.inserted.map(\.id) + summary.updated.map(\.id) + summary.deleted.map(\.id))
            }
        }
    }

    /// Applies handed-over commits to registered objects (main actor only).
    package func applyInbox() {
        apply(takeInbox())
    }

    /// Takes the commits handed over so far.
    func takeInbox() -> [ChangeSet] {
        guard inboxHasWork.load(ordering: .acquiring) else { return [] }
        inboxHasWork.store(false, ordering: .releasing)
        return inbox.withLock { inbox in
            defer { inbox.removeAll() }
            return inbox
        }
    }

    /// Applies what a batch operation of this update context did to its objects: clean ones
    /// take the new values, changed ones keep their own values for the keys they changed,
    /// deleted ones leave the context (their uncommitted changes with them).
    package func absorb(_ changes: ChangeSet) {
        for update in changes.updates {
            guard let object = registered(update.id), object.state == .clean || object.state == .updated else { continue }
            for (slot, value) in zip(update.slots, update.values) where slot < object.values.count {
                if var snapshot = object.beforeImage {
                    if object.values[slot].isIdentical(to: snapshot[slot]) { object.values[slot] = value }
                    snapshot[slot] = value
                    object.beforeImage = snapshot
                } else {
                    object.values[slot] = value
                }
            }
        }
        // Only references made before the batch can point at what it deleted: none when nothing
        // is pending.
        if !changed.isEmpty || !links.isEmpty { batchDeleted.formUnion(changes.deletes.lazy.map(\.id)) }
        for delete in changes.deletes {
            guard let object = registered(delete.id) else { continue }
            object.state = .deleted
            object.beforeImage = nil
            registry[delete.id] = nil
            changed[delete.id] = nil
        }
        generation += 1
        // Values and deletions written without `markChanged`: `fetchOrCreate` files the
        // pending objects again when it next needs them.
        pendingUnique = nil
    }

    /// Applies commits to registered objects: changed values, deletions, and deletions undone.
    func apply(_ pending: [ChangeSet]) {
        guard !pending.isEmpty else { return }
        for changes in pending {
            for update in changes.updates {
                guard let object = registered(update.id), object.state == .clean else { continue }
                for (slot, value) in zip(update.slots, update.values) where slot < object.values.count {
                    object.values[slot] = value
                }
            }
            for delete in changes.deletes {
                guard let object = registered(delete.id) else { continue }
                object.state = .deleted
                registry[delete.id] = nil
                keepDeletion(object)
            }
            // What undoes a deletion whose save failed (`QueuedStore.undo`) inserts its rows
            // again: the object this context marked deleted lives again, with the stored values
            // (unless a read already brought it back, `revivedDeletion`).
            if changes.undoesFailedSave {
                for insert in changes.inserts {
                    guard let object = revivedDeletion(insert.id) else { continue }
                    object.values = insert.row.values
                    object.fault = nil
                }
            }
        }
        generation += 1
        #if DEBUG
        checkInvariants()
        #endif
    }

    /// The object a handed-over commit deleted for `id`, registered again as clean, if it is
    /// still held somewhere; `nil` otherwise. Called when the row is back: by what undoes the
    /// deletion, or by a read that found the row first (the failed commit leaves the store's
    /// overlay before its undo is handed over), which would otherwise make a second object for
    /// the ID. The caller gives it its values. (Reads that make objects ask only when the
    /// table holds something: they make a hundred thousand at a time.)
    func revivedDeletion(_ id: ObjectID) -> ManagedObject? {
        guard let object = mergedDeletions.removeValue(forKey: id)?.object,
              object.state == .deleted, registered(id) == nil else { return nil }
        object.state = .clean
        register(object)
        return object
    }

    /// Remembers an object a handed-over commit deleted, or whose row a fault found gone, or
    /// that this update's commit deleted (`here`), in case that deletion's save fails.
    func keepDeletion(_ object: ManagedObject, here: Bool = false) {
        mergedDeletions[object.objectID] = WeakObject(object: object, deletedHere: here)
        guard mergedDeletions.count >= mergedDeletionsSweepAt else { return }
        mergedDeletions = mergedDeletions.filter { $0.value.object != nil }
        mergedDeletionsSweepAt = max(64, mergedDeletions.count * 2)
    }
}
