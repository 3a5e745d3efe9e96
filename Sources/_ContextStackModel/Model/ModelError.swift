import _ContextStackCore

/// A model that cannot work: thrown by `Model(...)` with a message naming the entity and property.
public struct ModelError: Error, CustomStringConvertible, Sendable {
    /// What is wrong, as a value you can match.
    public struct Code: Hashable, Sendable {
        private enum Base: Hashable, Sendable {
            case duplicateEntity, unknownDestination, badInverse, emptyModel, unknownConfiguration, reservedName
            case relationshipAcrossConfigurations, invalidUniqueness
        }
        private let base: Base
        /// Two entities share a name.
        public static let duplicateEntity = Code(base: .duplicateEntity)
        /// A relationship points to an entity that is not in the model.
        public static let unknownDestination = Code(base: .unknownDestination)
        /// An inverse does not exist, is not a relationship, or does not point back.
        public static let badInverse = Code(base: .badInverse)
        /// The model has no entities.
        public static let emptyModel = Code(base: .emptyModel)
        /// A property name starts with `Z_`, which the store keeps for its own columns.
        public static let reservedName = Code(base: .reservedName)
        /// A uniqueness constraint (`@Entity(unique:)`) is empty, names a key that is not an
        /// attribute or to-one relationship of the entity, or names one twice.
        public static let invalidUniqueness = Code(base: .invalidUniqueness)
        /// A configuration lists an entity that is not in the model.
        public static let unknownConfiguration = Code(base: .unknownConfiguration)
        /// A relationship points to an entity that a configuration holding its source lacks:
        /// the two would live in different stores.
        public static let relationshipAcrossConfigurations = Code(base: .relationshipAcrossConfigurations)
    }

    public let code: Code
    public let message: String

    public var description: String { message }
}
