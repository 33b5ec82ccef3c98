package lock

// Exported for the tests of package lock_test only.
var (
	UnknownSchemeError = unknownSchemeError
	DriverPackages     = driverPackages
)
