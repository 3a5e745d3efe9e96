import _ContextStackCore

/// A store that cannot be opened or used: thrown by `addDatabaseStore` and friends, on every
/// kind of store.
public struct StoreError: Error, CustomStringConvertible, Sendable {
    /// What is wrong, as a value you can match.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Hashable, Sendable {
            case modelMismatch, alreadyAdded, unknownConfiguration, cannotOpen, notADatabase, foreignDatabase
            case cannotMigrate, corrupt, permissionDenied, unsupported, newerModel
        }
        private let base: Base
        /// The file was written by a different model, and `autoMigrating` is false.
        public static let modelMismatch = Code(base: .modelMismatch)
        /// A newer model migrated the store, this model is one it had before, and migrating
        /// back would drop what the newer version wrote: the tables, columns or rows the
        /// message names. The store is left as it was, even with `resetOnFailure`: run the
        /// newer version of the app.
        public static let newerModel = Code(base: .newerModel)
        /// The file was written by a different model, and the change cannot be inferred (an
        /// attribute's type changed, a new unique constraint that stored rows violate): the
        /// message names the entity and attribute; the file is left as it was.
        public static let cannotMigrate = Code(base: .cannotMigrate)
        /// A store for this configuration (or for one of its entities) is already added, or
        /// the file is already added with other settings.
        public static let alreadyAdded = Code(base: .alreadyAdded)
        /// The model has no configuration of that name.
        public static let unknownConfiguration = Code(base: .unknownConfiguration)
        /// The file is an SQLite database that ContextStack did not create; it is left untouched.
        public static let foreignDatabase = Code(base: .foreignDatabase)
        /// The file cannot be opened or created.
        public static let cannotOpen = Code(base: .cannotOpen)
        /// The file is not an SQLite database; it is left untouched, even with `resetOnFailure`.
        public static let notADatabase = Code(base: .notADatabase)
        /// The file is an SQLite database but damaged (truncated, or pages that do not parse).
        public static let corrupt = Code(base: .corrupt)
        /// The process may not read or write the file, or may not create files in its
        /// directory (a store needs its `-wal` and `-shm` files beside it).
        public static let permissionDenied = Code(base: .permissionDenied)
        /// The stack cannot do what its stores were asked to together (history over several
        /// SQLite files, say); the message says what to change.
        public static let unsupported = Code(base: .unsupported)

        /// The code's name, as written after the dot: `permissionDenied`.
        public var description: String { base.rawValue }
    }

    public let code: Code
    public let message: String
    /// The database's error underneath, when there is one: a `SQLiteError`, or a
    /// `PostgresError` for a PostgreSQL store.
    public let underlying: (any Error)?

    package init(_ code: Code, _ message: String, underlying: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
    }

    public var description: String {
        underlying.map { "\(message) (\($0))" } ?? message
    }
}
