module github.com/distlock/lock/soak

go 1.25.0

replace github.com/distlock/lock => ../

require github.com/anishathalye/porcupine v1.3.1

require github.com/distlock/lock v0.0.0-00010101000000-000000000000
