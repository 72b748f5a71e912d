"""Node label keys this project owns; worker groups and charts select nodes by these."""

ROLE_LABEL = "llm-serving/role"
SYSTEM_ROLE = "system"
