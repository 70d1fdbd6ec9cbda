"""apex-mesh deployables: composition only, no protocol logic (STYLE.md section 3.1)."""
