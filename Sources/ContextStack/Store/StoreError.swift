import Foundation

/// A store that cannot be opened or used: thrown by `addDatabaseStore` and friends.
public struct StoreError: Error, CustomStringConvertible, Sendable {
    /// What is wrong, as a value you can match.
    public struct Code: Hashable, Sendable {
        private enum Base: Hashable, Sendable {
            case modelMismatch, alreadyAdded, unknownConfiguration, cannotOpen, notADatabase, foreignDatabase
        }
        private let base: Base
        /// The file was written by a different model, and migrating it is not possible.
        public static let modelMismatch = Code(base: .modelMismatch)
        /// A store for this configuration is already added.
        public static let alreadyAdded = Code(base: .alreadyAdded)
        /// The model has no configuration of that name.
        public static let unknownConfiguration = Code(base: .unknownConfiguration)
        /// The file is an SQLite database that ContextStack did not create; it is left untouched.
        public static let foreignDatabase = Code(base: .foreignDatabase)
        /// The file cannot be opened or created.
        public static let cannotOpen = Code(base: .cannotOpen)
        /// The file is not an SQLite database, or is damaged.
        public static let notADatabase = Code(base: .notADatabase)
    }

    public let code: Code
    public let message: String
    /// The SQLite error underneath, when there is one.
    public let underlying: SQLiteError?

    init(_ code: Code, _ message: String, underlying: SQLiteError? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
    }

    public var description: String {
        underlying.map { "\(message) (\($0))" } ?? message
    }
}
