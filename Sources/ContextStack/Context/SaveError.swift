/// A commit that cannot be saved because of the model's rules (a `.deny` delete rule). Thrown by
/// `commit()`; the update's changes stay pending. (Constraint failures found by SQLite while
/// writing arrive as `SQLiteError`.)
public struct SaveError: Error, CustomStringConvertible, Sendable {
    /// What is wrong, as a value you can match.
    public struct Code: Hashable, Sendable {
        private enum Base: Hashable, Sendable { case deleteDenied }
        private let base: Base
        /// A deleted object has a non-empty relationship whose delete rule is `.deny`.
        public static let deleteDenied = Code(base: .deleteDenied)
    }

    public let code: Code
    public let message: String
    /// The objects involved.
    public let objects: [ObjectID]

    init(_ code: Code, _ message: String, objects: [ObjectID] = []) {
        self.code = code
        self.message = message
        self.objects = objects
    }

    public var description: String { message }
}
