import _ContextStackCore

/// What a commit does when an object it changes was changed in the store since the committing
/// context read it (optimistic locking: the store compares the values the context started from
/// with the values stored now).
public enum MergePolicy: Sendable, Hashable {
    /// The committing context's changed properties win; properties it did not change keep the
    /// newer stored values (the default). Concurrent changes to different properties of one
    /// object are never lost.
    case objectTrump
    /// Properties changed in the store since the context read them keep the stored values;
    /// the context's other changes are saved.
    case storeTrump
    /// The object is saved whole as the committing context has it, unchanged properties
    /// included: concurrent changes to it are overwritten.
    case overwrite
    /// The committing context's changes to a conflicting object are dropped.
    case rollback
    /// A conflict makes `commit()` throw `MergeConflictError`; nothing of the commit is saved.
    case error

    /// Whether the policy needs to know what is stored now.
    package var checksStore: Bool { self != .objectTrump }
}

/// A commit that met changes made in the store since its context read the objects, under
/// `MergePolicy.error`. Nothing of the commit is saved.
public struct MergeConflictError: Error, CustomStringConvertible, Sendable {
    /// One property of one object changed on both sides.
    public struct Conflict: Sendable, CustomStringConvertible {
        /// The object.
        public let objectID: ObjectID
        /// The property.
        public let key: String
        /// The value the committing context started from.
        public let snapshot: Value
        /// The value stored now (`.null` also when the object was deleted).
        public let stored: Value
        /// The committing context's value.
        public let ours: Value

        package init(objectID: ObjectID, key: String, snapshot: Value, stored: Value, ours: Value) {
            self.objectID = objectID
            self.key = key
            self.snapshot = snapshot
            self.stored = stored
            self.ours = ours
        }

        public var description: String {
            "\(objectID).\(key): was \(snapshot), stored \(stored), ours \(ours)"
        }
    }

    /// Every conflicting property; for a deleted object, one entry with the key `"<deleted>"`.
    public let conflicts: [Conflict]
    /// Why the commit conflicts, when it is not its merge policy (`.error`) that refused it.
    let explanation: String?

    package init(conflicts: [Conflict], explanation: String? = nil) {
        self.conflicts = conflicts
        self.explanation = explanation
    }

    /// The conflict of an object that no longer exists: one conflict, key `"<deleted>"`.
    package static func deleted(_ id: ObjectID, explanation: String) -> MergeConflictError {
        MergeConflictError(conflicts: [.init(objectID: id, key: "<deleted>", snapshot: .null, stored: .null, ours: .null)],
                           explanation: explanation)
    }

    /// Why `apply(_:expecting:)` refuses, whatever the merge policy.
    package static let appliedExpecting = "apply(_:expecting:) found the object changed since the snapshot it was given, whatever the merge policy"

    /// The objects in conflict.
    public var objectIDs: [ObjectID] {
        var seen = Set<ObjectID>()
        return conflicts.map(\.objectID).filter { seen.insert($0).inserted }
    }

    public var description: String {
        "The commit conflicts with changes saved since its objects were read (\(explanation ?? "merge policy .error")): "
            + conflicts.map(\.description).joined(separator: "; ")
    }
}
