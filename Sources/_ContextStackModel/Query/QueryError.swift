import _ContextStackCore

/// A query that cannot run: an unknown key, a value of the wrong type, a predicate shape that
/// an operation cannot use. Thrown before any SQL runs; the message names the key and entity.
public struct QueryError: Error, CustomStringConvertible, Sendable {
    /// What is wrong, as a value you can match.
    public struct Code: Hashable, Sendable {
        private enum Base: Hashable, Sendable {
            case unknownKey, typeMismatch, unsupported, invalidFetchOrCreate, objectNotFound, invalidFormat
        }
        private let base: Base
        /// The key is not a property of the entity (or a path step is not a to-one relationship).
        public static let unknownKey = Code(base: .unknownKey)
        /// The value cannot be compared with the key's attribute.
        public static let typeMismatch = Code(base: .typeMismatch)
        /// The predicate or sort uses something this operation does not support.
        public static let unsupported = Code(base: .unsupported)
        /// `fetchOrCreate` needs `key == constant` terms joined by `&&`.
        public static let invalidFetchOrCreate = Code(base: .invalidFetchOrCreate)
        /// A format string is malformed, or its arguments do not fit it; the message shows
        /// the position with a caret under the offending character.
        public static let invalidFormat = Code(base: .invalidFormat)
        /// No object with this ID exists.
        public static let objectNotFound = Code(base: .objectNotFound)
    }

    public let code: Code
    public let message: String
    /// The key involved, when there is one.
    public let key: String?
    /// The entity queried.
    public let entity: String?

    /// For a format error: the offset (in characters) of the offending character.
    public internal(set) var position: Int? = nil

    package init(_ code: Code, _ message: String, key: String? = nil, entity: String? = nil) {
        self.code = code
        self.message = message
        self.key = key
        self.entity = entity
    }

    public var description: String { message }
}
