package idemaws

// ForgetTableEntries takes keys out of the table generated from the AWS
// models until the returned function puts them back, so that a test sees
// an operation newer than the table.
func ForgetTableEntries(keys ...string) (restore func()) {
	kept := map[string]tokenSpec{}
	for _, k := range keys {
		kept[k] = sdkTokens[k]
		delete(sdkTokens, k)
	}
	return func() {
		for k, s := range kept {
			sdkTokens[k] = s
		}
	}
}
