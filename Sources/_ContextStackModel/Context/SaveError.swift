import _ContextStackCore

/// A commit that cannot be saved because of the model's rules: a `.deny` delete rule, a
/// uniqueness constraint. Thrown by `commit()`; nothing of the commit is saved, and the
/// update's changes stay pending (an update block that rethrows it rolls them back).
///
/// For example:
///
/// ```swift
/// do {
///     try world.beginUpdateAndWait { update in
///         let person = try update.create(Person.self)
///         person.email = "monk@example.com"           // @Attribute(.unique), already used
///         try update.commit()
///     }
/// } catch let error as SaveError where error.code == .uniquenessViolated {
///     print(error.entityName, error.keys, error.values)  // Person ["email"] ["monk@example.com"]
/// }
/// ```
public struct SaveError: Error, CustomStringConvertible, Sendable {
    /// What is wrong, as a value you can match.
    public struct Code: Hashable, Sendable {
        private enum Base: Hashable, Sendable { case deleteDenied, uniquenessViolated, dependsOnFailedCommit, deletesMergedObject, relatesToDeletedObject }
        private let base: Base
        /// A deleted object has a non-empty relationship whose delete rule is `.deny`.
        public static let deleteDenied = Code(base: .deleteDenied)
        /// Two objects would hold the same values of a uniqueness constraint
        /// (`@Attribute(.unique)`, `@Entity(unique:)`): one in this commit and one already
        /// saved or committed, or two in this commit. `objects` names both.
        public static let uniquenessViolated = Code(base: .uniquenessViolated)
        /// The commit changes an object, or relates an object to one, that an earlier commit
        /// inserted and then failed to save: it was visible (committed to a root or a main
        /// context) but never stored. `objects` names it. The earlier commit's own error went to
        /// `stack.onError` or to its caller; fetch again and redo the change.
        public static let dependsOnFailedCommit = Code(base: .dependsOnFailedCommit)
        /// The commit deletes an object that `fetchOrCreate` made and that was then merged into
        /// the row another process (or stack) saved with the same unique values: the context
        /// still held it. Its delete rules ran over what this context knew of it, not over the
        /// saved row's relationships, so the row is not deleted. `objects` names the object,
        /// then the saved row; fetch the row and delete it.
        public static let deletesMergedObject = Code(base: .deletesMergedObject)
        /// The commit relates an object to one that is no longer stored: another commit — of
        /// another context, process or machine — deleted it after this context read it.
        /// `objects` names the object related, then the deleted one. Nothing of the commit is
        /// saved: fetch again and redo the change (the deleted object is gone for good).
        public static let relatesToDeletedObject = Code(base: .relatesToDeletedObject)
    }

    public let code: Code
    public let message: String
    /// The objects involved (for `.uniquenessViolated`: the one being saved, then the one that
    /// already holds the values, when known).
    public let objects: [ObjectID]
    /// The entity whose rule failed (for `.uniquenessViolated`: the entity that declares the
    /// constraint).
    public let entityName: String?
    /// The keys of the failed constraint (`["email"]`), empty for other codes.
    public let keys: [String]
    /// The values the keys would have held twice, in the order of `keys` (kept out of
    /// `message`, so that logging the error does not leak data; empty when SQLite found the
    /// duplicate, as it does not say which values).
    public let values: [Value]

    package init(_ code: Code, _ message: String, objects: [ObjectID] = [], entityName: String? = nil,
         keys: [String] = [], values: [Value] = []) {
        self.code = code
        self.message = message
        self.objects = objects
        self.entityName = entityName ?? objects.first?.entityName
        self.keys = keys
        self.values = values
    }

    public var description: String { message }

    /// The error of a commit that deletes `id`, which the writer merged into `row`.
    package static func deletesMergedObject(_ id: ObjectID, mergedInto row: ObjectID) -> SaveError {
        SaveError(.deletesMergedObject, """
            The commit deletes \(id), which fetchOrCreate made and the store then merged into \(row), the row \
            another process saved with the same unique values. The delete rules ran over what this context \
            knew of \(id), not over \(row)'s relationships, so nothing of this commit is saved: fetch \(row) \
            (by its unique values) and delete it.
            """, objects: [id, row])
    }

    /// The error of a commit that relates `referrer` to `target`, which is no longer stored.
    package static func relatesToDeletedObject(_ referrer: ObjectID, _ target: ObjectID) -> SaveError {
        SaveError(.relatesToDeletedObject, """
            The commit relates \(referrer) to \(target), but \(target) is no longer stored: another commit \
            deleted it after this context read it. Nothing of this commit is saved: fetch the objects \
            again and redo the change without \(target).
            """, objects: [referrer, target])
    }

    /// The error of a commit that refers to `id`, which a failed commit inserted.
    package static func dependsOnFailedCommit(_ id: ObjectID) -> SaveError {
        SaveError(.dependsOnFailedCommit, """
            The commit changes \(id), or relates an object to it, but the commit that inserted \(id) \
            failed to save, so \(id) was never stored (that commit's error went to stack.onError or \
            to its caller). Nothing of this commit is saved: fetch the objects again and redo the change.
            """, objects: [id])
    }
}
