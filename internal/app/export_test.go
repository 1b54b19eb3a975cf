package app

// PushCap is pushCap, for the tests of package app_test.
var PushCap = pushCap
