"""chaos/audit"""
